#include "tests/support/filesystem_fill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace aprfs::testing {

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) != 0) return 0;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

uint64_t FillFilesystem(const std::string& dir, uint64_t leave, const std::string& name) {
  const int fd = ::open((dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return FreeBytes(dir);
  // Big pieces, then pages: the last partial megabyte is filled too.
  for (size_t piece : {size_t{1} << 20, size_t{4096}}) {
    const std::string bytes(piece, 'f');
    while (::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(piece)) {
    }
  }
  if (leave > 0) {
    struct stat st;
    ::fstat(fd, &st);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (::ftruncate(fd, static_cast<off_t>(size > leave ? size - leave : 0)) != 0) {
      ::close(fd);
      return FreeBytes(dir);
    }
  }
  ::close(fd);
  return FreeBytes(dir);
}

}  // namespace aprfs::testing
