#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <optional>
#include <thread>

#include "fetch/chunk_store.h"

namespace aprfs {

// The folder of every chunk store (<root>/<etag>/...), shared by all processes, with a size
// limit: a janitor thread evicts the least recently used chunks (never a claimed one, never
// one of a published file) when the present bytes of all stores exceed it.
class ChunkCache {
 public:
  static constexpr uint32_t kChunkSize = 8u << 20;

  // `limit_bytes` 0 means no limit (no janitor).
  ChunkCache(std::string root, uint64_t limit_bytes);
  ~ChunkCache();

  const std::string& root() const { return root_; }
  // The store of one remote file, by its etag (the sha256 of LFS files).
  std::shared_ptr<ChunkStore> Store(const std::string& etag, uint64_t size);
  // Present bytes over every store, and one eviction pass if over the limit. Returns the bytes
  // present after the pass. Called by the janitor; public for tests and `aprfs status`.
  uint64_t EnforceLimit();
  // Wakes the janitor early (after a burst of downloads).
  void Poke();

 private:
  void Janitor();

  const std::string root_;
  const uint64_t limit_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool poked_ = false;
  std::thread janitor_;
};

// Parses "50G", "512M", "1T", "1048576" (binary units) into bytes; nullopt when malformed.
std::optional<uint64_t> ParseSize(const std::string& text);

}  // namespace aprfs
