#pragma once

#include <atomic>
#include <cstdint>

namespace aprfs {

// What was served of one file of a model (its .apr or one of its views). Owned by the catalog's
// slot of the model, so the figures survive a rebuild of its plan (a changed shard gives a new
// inode, not a new history).
struct ReadCounters {
  std::atomic<uint64_t> bytes_read{0};  // bytes returned to readers
  std::atomic<uint64_t> reads{0};       // FUSE read requests answered with bytes
  std::atomic<uint64_t> errors{0};      // FUSE read requests answered with EIO
  // Computed bytes: how many were encoded, from how many source bytes, in how much thread time.
  std::atomic<uint64_t> bytes_computed{0};
  std::atomic<uint64_t> source_bytes_encoded{0};
  std::atomic<uint64_t> encode_ns{0};
  // The computed-chunk cache: chunks served from it, chunks computed for lack of it, bytes
  // stored into it, bytes computed and still waiting for the background writer.
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
  std::atomic<uint64_t> cache_stored_bytes{0};
  std::atomic<uint64_t> cache_pending_bytes{0};
};

}  // namespace aprfs
