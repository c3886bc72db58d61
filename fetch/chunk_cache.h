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

#include "fetch/chunk_memory.h"
#include "fetch/chunk_store.h"

namespace aprfs {

// The folder of every chunk store (<root>/<etag>/...), shared by all processes, with a size
// limit: a janitor thread evicts the least recently used chunks (never a claimed one, never
// one of a published file) when the present bytes of all stores exceed it. Whatever the limit,
// the cache keeps kKeepFreeShare of its disk free: a model's computed views can be larger than
// the disk, and a cache that fills it fails everyone else's writes.
class ChunkCache {
 public:
  static constexpr uint32_t kChunkSize = 8u << 20;
  static constexpr double kKeepFreeShare = 0.05;

  // `limit_bytes` 0 means no limit (no janitor); `memory_bytes`: for chunks just downloaded.
  ChunkCache(std::string root, uint64_t limit_bytes,
             uint64_t memory_bytes = ChunkMemory::DefaultLimit());
  ~ChunkCache();

  const std::string& root() const { return root_; }
  uint64_t limit() const { return limit_; }  // 0: none
  // Chunks being downloaded and just downloaded, in memory (served from there, see ChunkMemory).
  ChunkMemory& memory() { return memory_; }
  // The store of one remote file, by its etag (the sha256 of LFS files).
  std::shared_ptr<ChunkStore> Store(const std::string& etag, uint64_t size);
  // Present bytes over every store, and one eviction pass if they plus `incoming` exceed the
  // limit or would take the disk's free space below its share. Returns the bytes present after
  // the pass. Called by the janitor and Reserve; public for tests and `aprfs status`.
  uint64_t EnforceLimit(uint64_t incoming = 0);
  // Makes room for `bytes` about to be stored: evicts now when they would take the cache over
  // its limit or the disk below its free share, so both hold while chunks arrive, not only when
  // the janitor wakes. False when even then they would not fit above the free share (the disk
  // is full of other files): a caller that can do without storing them should. Either way,
  // Release ends the reservation.
  bool Reserve(uint64_t bytes);
  // Ends a reservation: the chunk was stored (`stored`) or its download failed.
  void Release(uint64_t bytes, bool stored);
  // The disk is full (ENOSPC) whatever the limit: evicts the least recently used chunks worth at
  // least `bytes`. Returns the bytes evicted (0: nothing could be).
  uint64_t MakeRoom(uint64_t bytes);

 private:
  struct Scan;
  Scan ScanStores();
  // Evicts the oldest chunks of `scan` until `bytes` are freed, one evictor at a time across
  // processes (`wait`: for the one running now, else give up). Returns the bytes evicted.
  uint64_t EvictOldest(Scan& scan, uint64_t bytes, bool wait);
  void Janitor();
  // Free bytes on the cache's disk above its free share (negative below it); INT64_MAX when
  // the disk cannot be asked.
  int64_t SpareDiskBytes() const;

  const std::string root_;
  const uint64_t limit_;
  ChunkMemory memory_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  // Present bytes as of the last pass plus chunks stored since (other processes' downloads are
  // seen by the next pass, the janitor's within seconds), and bytes being downloaded.
  std::mutex reserve_mu_;
  std::optional<uint64_t> known_present_;
  uint64_t in_flight_ = 0;
  std::thread janitor_;
};

// Parses "50G", "512M", "1T", "1048576" (binary units) into bytes; nullopt when malformed.
std::optional<uint64_t> ParseSize(const std::string& text);

}  // namespace aprfs
