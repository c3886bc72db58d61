#pragma once

#include <cstdint>
#include <string>

namespace aprfs::testing {

// Bytes of `path` in the page cache (mincore over a read-only mapping); 0 when unreadable.
uint64_t ResidentBytes(const std::string& path);

}  // namespace aprfs::testing
