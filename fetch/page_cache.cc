#include "fetch/page_cache.h"

#include <fcntl.h>

namespace aprfs {

// The kernel caches files in folios of up to 2 MiB and drops only those wholly inside the advised
// range, so the range reaches back to the 2 MiB boundary (for a sequential reader, bytes the
// previous request served) and, at the end of the file, to its end.
void DropServedRange(int fd, uint64_t offset, size_t length, uint64_t size) {
  constexpr uint64_t kLargestFolio = 2 << 20;
  uint64_t from = offset / kLargestFolio * kLargestFolio;
  uint64_t end = offset + length;
  off_t span = end >= size ? 0 : static_cast<off_t>(end - from);  // 0: to the end of the file
  ::posix_fadvise(fd, static_cast<off_t>(from), span, POSIX_FADV_DONTNEED);
}

}  // namespace aprfs
