#include "fs/views/chunk_writer.h"

#include <map>
#include <vector>

#include <spdlog/spdlog.h>


namespace aprfs {

ComputedChunkWriter::ComputedChunkWriter(ChunkCache* cache, size_t max_queued)
    : cache_(cache), max_queued_(max_queued), thread_([this] { Run(); }) {}

ComputedChunkWriter::~ComputedChunkWriter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
  for (Item& item : queue_) item.done(false);
}

void ComputedChunkWriter::Enqueue(Item item) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return stopping_ || queue_.size() < max_queued_; });
  if (stopping_) {
    lock.unlock();
    item.done(false);
    return;
  }
  queue_.push_back(std::move(item));
  changed_.notify_all();
}

void ComputedChunkWriter::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::deque<Item> batch;
    batch.swap(queue_);
    changed_.notify_all();  // room for the readers waiting
    lock.unlock();
    StoreBatch(batch);
    lock.lock();
  }
}

void ComputedChunkWriter::StoreBatch(std::deque<Item>& batch) {
  struct Written {
    Item* item;
    std::unique_ptr<ChunkStore::Claim> claim;
  };
  std::map<ChunkStore*, std::vector<Written>> by_store;
  for (Item& item : batch) {
    ChunkStore& store = *item.store;
    // Another process (or an earlier batch) may have stored it; a claim held elsewhere means
    // someone is storing it now.
    std::unique_ptr<ChunkStore::Claim> claim = store.TryClaim(item.chunk);
    if (!claim || store.Present(item.chunk)) {
      item.done(false);
      continue;
    }
    const uint64_t begin = store.ChunkBegin(item.chunk);
    // A disk full of other files: the chunk is not stored (it is a cache), and readers
    // recompute it.
    if (cache_ && !cache_->Reserve(item.bytes->size())) {
      spdlog::debug("computed chunk {} of {} not stored: the disk keeps its free share", item.chunk,
                    store.dir());
      store.Discard(*claim);
      cache_->Release(item.bytes->size(), false);
      item.done(false);
      continue;
    }
    if (int err = store.Write(*claim, begin, *item.bytes)) {
      spdlog::debug("computed chunk {} of {} not stored: {}", item.chunk, store.dir(), err);
      store.Discard(*claim);
      if (cache_) cache_->Release(item.bytes->size(), false);
      item.done(false);
      continue;
    }
    by_store[&store].push_back({&item, std::move(claim)});
  }
  for (auto& [store, written] : by_store) {
    std::vector<const ChunkStore::Claim*> claims;
    for (const Written& w : written) claims.push_back(w.claim.get());
    const int err = store->Commit(claims);
    for (Written& w : written) {
      const uint64_t length = w.item->bytes->size();
      if (err) store->Discard(*w.claim);
      if (cache_) cache_->Release(length, err == 0);
      // The written pages stay cached: readers of the rest of the chunk read them from the
      // store next, which drops what it serves (ChunkStore::Read).
      w.claim.reset();
      w.item->done(err == 0);
    }
  }
}

}  // namespace aprfs
