#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace aprfs {

// A buffer of `size` bytes for one computed chunk, recycled when its last user lets go: a fresh
// allocation of megabytes is a fresh mmap (the daemon's malloc threshold), and its thousand page
// faults cost more than encoding the chunk. At most a few idle buffers are kept.
std::shared_ptr<std::string> ChunkBuffer(size_t size);

}  // namespace aprfs
