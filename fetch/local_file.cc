#include "fetch/local_file.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "fetch/page_cache.h"

namespace aprfs {

FileIdentity IdentityOf(const struct stat& st) {
  return {st.st_dev, st.st_ino, static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::shared_ptr<LocalFile> LocalFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::system_error(EINVAL, std::generic_category(), path + ": not a regular file");
  }
  return std::shared_ptr<LocalFile>(new LocalFile(path, fd, IdentityOf(st)));
}

LocalFile::LocalFile(std::string path, int fd, FileIdentity identity)
    : path_(std::move(path)), fd_(fd), identity_(identity) {}

LocalFile::~LocalFile() { ::close(fd_); }

int LocalFile::CheckUnchanged() {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return EIO;
  FileIdentity now = IdentityOf(st);
  if (now == identity_) return 0;
  if (!change_logged_.exchange(true)) {
    spdlog::error("{}: changed since the model was mounted (size {} -> {}); its reads now fail "
                  "with EIO until the model is looked up again",
                  path_, identity_.size, now.size);
  }
  return EIO;
}

int LocalFile::Read(uint64_t offset, size_t length, char* dst) {
  int err = ReadKeepingCache(offset, length, dst);
  if (err == 0) DropCached(offset, length);
  return err;
}

void LocalFile::DropCached(uint64_t offset, uint64_t length) {
  DropServedRange(fd_, offset, length, identity_.size);
}

std::string LocalFile::identity() const {
  return "file:" + std::to_string(identity_.device) + ":" + std::to_string(identity_.inode) + ":" +
         std::to_string(identity_.size) + ":" + std::to_string(identity_.mtime_ns);
}

int LocalFile::ReadKeepingCache(uint64_t offset, size_t length, char* dst) {
  if (offset > identity_.size || length > identity_.size - offset) return EIO;
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd_, dst + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("{}: read of {} bytes at {} failed: {}", path_, length, offset,
                    std::strerror(errno));
      return EIO;
    }
    if (n == 0) break;  // the file shrank: caught below
    done += static_cast<size_t>(n);
  }
  // Checked after the read, so bytes from a file modified during the read are never served.
  int changed = CheckUnchanged();
  if (changed) return changed;
  if (done != length) return EIO;
  return 0;
}

}  // namespace aprfs
