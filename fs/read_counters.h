#pragma once

#include <atomic>
#include <cstdint>

namespace aprfs {

// What the FUSE layer served for one model. Owned by the catalog's slot of the model, so the
// figures survive a rebuild of its plan (a changed shard gives a new inode, not a new history).
struct ReadCounters {
  std::atomic<uint64_t> bytes_read{0};  // bytes returned to readers of the .apr
  std::atomic<uint64_t> reads{0};       // FUSE read requests answered with bytes
  std::atomic<uint64_t> errors{0};      // FUSE read requests answered with EIO
};

}  // namespace aprfs
