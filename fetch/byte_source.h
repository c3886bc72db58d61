#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace aprfs {

// Where the bytes of one shard come from. Implementations are thread-safe.
class ByteSource {
 public:
  virtual ~ByteSource() = default;

  // Fills dst with exactly `length` bytes at `offset`, or returns an errno (EIO when the
  // source changed, vanished or failed). Never a short read, never other bytes.
  virtual int Read(uint64_t offset, size_t length, char* dst) = 0;

  virtual uint64_t size() const = 0;
  // A name for logs and errors, e.g. the file path.
  virtual const std::string& name() const = 0;
};

}  // namespace aprfs
