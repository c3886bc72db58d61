#pragma once

#include <cstddef>
#include <cstdint>

namespace aprfs {

// Drops the pages of [offset, offset + length) of a file (`size` bytes) from the page cache once
// their bytes have been served into the .apr's own page cache (kept across opens): keeping the
// source's copy too would cache every byte twice and halve what fits in memory.
void DropServedRange(int fd, uint64_t offset, size_t length, uint64_t size);

}  // namespace aprfs
