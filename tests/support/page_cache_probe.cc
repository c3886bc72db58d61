#include "tests/support/page_cache_probe.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

namespace aprfs::testing {

uint64_t ResidentBytes(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  uint64_t bytes = 0;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    const size_t size = static_cast<size_t>(st.st_size);
    void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> resident((size + page - 1) / page);
      if (mincore(map, size, resident.data()) == 0) {
        for (unsigned char r : resident) bytes += (r & 1) ? page : 0;
      }
      munmap(map, size);
    }
  }
  close(fd);
  return bytes;
}

}  // namespace aprfs::testing
