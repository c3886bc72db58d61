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

  // The same, leaving the pages it read in the page cache: for a caller that reads a range in
  // pieces (in parallel) and lets go of it as a whole with DropCached.
  virtual int ReadKeepingCache(uint64_t offset, size_t length, char* dst) {
    return Read(offset, length, dst);
  }
  virtual void DropCached(uint64_t /*offset*/, uint64_t /*length*/) {}

  virtual uint64_t size() const = 0;
  // A name for logs and errors, e.g. the file path.
  virtual const std::string& name() const = 0;
  // What names these bytes for caches of things computed from them: the same identity means
  // the same bytes (a content hash, or a local file's device, inode, size and mtime).
  virtual std::string identity() const = 0;
};

}  // namespace aprfs
