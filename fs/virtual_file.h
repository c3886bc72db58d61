#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fetch/byte_source.h"
#include "format/apr/apr_plan.h"
#include "fs/footer_crc.h"

namespace aprfs {

// The merged .apr file, served from its plan: the prefix from memory, tensor bytes from their
// shard, padding as zeros, the footer from the CRC tracker. Thread-safe; no FUSE in here.
class VirtualFile {
 public:
  VirtualFile(std::string name, AprPlan plan, std::vector<std::shared_ptr<ByteSource>> sources);

  const std::string& name() const { return name_; }
  uint64_t size() const { return plan_.total_size; }
  const AprPlan& plan() const { return plan_; }
  const std::vector<std::shared_ptr<ByteSource>>& sources() const { return sources_; }
  FooterCrc& footer_crc() { return crc_; }

  // Reads up to `length` bytes at `offset` (fewer only at end of file) into dst. Returns the
  // byte count or -errno; never a short read in the middle, never wrong bytes.
  ssize_t Read(uint64_t offset, size_t length, char* dst, const CancelCheck& cancelled = {});

 private:
  // [offset, offset+length) entirely before the footer.
  int ReadBody(uint64_t offset, size_t length, char* dst);

  std::string name_;
  AprPlan plan_;
  std::vector<std::shared_ptr<ByteSource>> sources_;
  FooterCrc crc_;
};

}  // namespace aprfs
