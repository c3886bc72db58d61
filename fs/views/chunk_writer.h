#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fetch/chunk_cache.h"
#include "fetch/chunk_store.h"

namespace aprfs {

// Stores computed chunks in the background, so a read is answered as soon as its chunk is
// computed: the writer writes queued chunks, makes a batch durable with one fdatasync per store,
// and only then marks them present (a crash never leaves a half-written chunk marked). Bounded:
// when the disk is slower than the encoders, readers wait for room rather than memory growing.
class ComputedChunkWriter {
 public:
  struct Item {
    std::shared_ptr<ChunkStore> store;
    uint64_t chunk = 0;
    std::shared_ptr<const std::string> bytes;  // the chunk's whole length
    std::function<void(bool stored)> done;     // after it is stored, or given up
  };

  // `cache`: whose size limit the chunks count against (may be null).
  explicit ComputedChunkWriter(ChunkCache* cache, size_t max_queued = 8);
  // Gives up what is still queued (each `done(false)`).
  ~ComputedChunkWriter();
  ComputedChunkWriter(const ComputedChunkWriter&) = delete;
  ComputedChunkWriter& operator=(const ComputedChunkWriter&) = delete;

  // Queues a chunk; waits while the queue is full.
  void Enqueue(Item item);

 private:
  void Run();
  void StoreBatch(std::deque<Item>& batch);

  ChunkCache* const cache_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace aprfs
