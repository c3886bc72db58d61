#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "fetch/byte_source.h"

namespace aprfs {

// Size and modification time of a file when its plan was built. A shard that no longer
// matches (truncated, rewritten in place) is never served: reads fail with EIO.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;

  bool operator==(const FileIdentity&) const = default;
};

// A local file (an HF cache blob behind its snapshot symlink, or a plain file), kept open for
// the life of the plan: if the path is later replaced by a new file (as the HF client does),
// the open descriptor still reads the version the plan was built from.
class LocalFile final : public ByteSource {
 public:
  // Opens `path` (following symlinks). Throws std::system_error naming the path on failure.
  static std::shared_ptr<LocalFile> Open(const std::string& path);
  ~LocalFile() override;

  int Read(uint64_t offset, size_t length, char* dst) override;
  int ReadKeepingCache(uint64_t offset, size_t length, char* dst) override;
  void DropCached(uint64_t offset, uint64_t length) override;
  uint64_t size() const override { return identity_.size; }
  const std::string& name() const override { return path_; }
  std::string identity() const override;

  const FileIdentity& file_identity() const { return identity_; }
  int fd() const { return fd_; }
  // EIO-or-0: does the file still match the identity the plan was built with?
  int CheckUnchanged();

 private:
  LocalFile(std::string path, int fd, FileIdentity identity);

  std::string path_;
  int fd_;
  FileIdentity identity_;
  std::atomic<bool> change_logged_{false};
};

FileIdentity IdentityOf(const struct stat& st);

}  // namespace aprfs
