#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace aprfs {

// Memory for downloaded chunks, within one byte budget for the whole process (mountpoint-s3's
// memory limiter): a download reserves room for the chunks it fetches before it starts, fills
// page-aligned buffers (written to the chunk cache with O_DIRECT, past the page cache), and
// readers are served from them as soon as a chunk's last byte is in. Once stored, a buffer is
// kept for later readers until newer ones need the room, oldest first: a sequential reader
// behind its read-ahead is served from memory, never from the disk just written. Freed buffers are
// reused (a fresh one costs a page fault per 4 KiB: more than writing it to the disk); what sits
// unused for a while goes back to the system at the next call.
class ChunkMemory {
 public:
  // Page-aligned bytes counted against the budget until destroyed.
  class Buffer {
   public:
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    char* data() { return data_; }
    const char* data() const { return data_; }
    size_t capacity() const { return capacity_; }
    size_t size() const { return size_; }
    // Appends up to what fits; returns how many bytes were taken.
    size_t Append(const char* bytes, size_t length);

   private:
    friend class ChunkMemory;
    Buffer(ChunkMemory* owner, char* data, size_t capacity)
        : owner_(owner), data_(data), capacity_(capacity) {}
    std::chrono::steady_clock::time_point kept_since_;
    ChunkMemory* owner_;
    char* data_;
    size_t capacity_;
    size_t size_ = 0;
  };
  using Ref = std::shared_ptr<Buffer>;

  // Room reserved for the buffers of one download: what it does not take goes back to the budget
  // on destruction.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation();
    uint64_t bytes() const { return bytes_; }
    // A buffer of `capacity` bytes out of the reservation (beyond it when it holds less).
    Ref Take(size_t capacity);

   private:
    friend class ChunkMemory;
    Reservation(ChunkMemory* owner, uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    void GiveBack();  // what was not taken
    ChunkMemory* owner_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // How long memory nobody uses stays mapped: a kept buffer no reader came back for, a freed
  // buffer no download reused. A thread of its own lets it go.
  struct Idle {
    std::chrono::milliseconds kept{60000};
    std::chrono::milliseconds spare{10000};
  };
  // `limit` bytes for every buffer of the process, kept or in use.
  explicit ChunkMemory(uint64_t limit);
  ChunkMemory(uint64_t limit, Idle idle);
  ~ChunkMemory();
  ChunkMemory(const ChunkMemory&) = delete;
  ChunkMemory& operator=(const ChunkMemory&) = delete;

  // A share of the machine's memory: an eighth of it, at most 256 MiB, at least 64 MiB. (More
  // made a cold read slower, not faster: the first use of memory costs a page fault per 4 KiB,
  // 0.27 s per 512 MiB here, and the read-ahead window, half of it, keeps 8 connections busy
  // with 128 MiB. bench/README.md has the figures.)
  static uint64_t DefaultLimit();
  uint64_t limit() const { return limit_; }

  // Room for `bytes` of buffers: at once when it fits beside the buffers in use (kept ones are
  // dropped, oldest first, to make it) or when nothing else is in use; otherwise waits for
  // buffers in use to go. Null when `cancelled` says so first (looked at every 100 ms).
  std::optional<Reservation> Reserve(uint64_t bytes, const std::function<bool()>& cancelled);

  // Keeps a filled buffer for later readers until its room is needed, or for `Idle::kept`.
  void Keep(Ref buffer);
  // Lets go of a kept buffer before its time (its reader has read it to the end).
  void Forget(const Buffer* buffer);

  uint64_t used() const;   // bytes of live buffers and reservations
  uint64_t kept() const;   // bytes of buffers kept for readers
  uint64_t spare() const;  // bytes of freed buffers held for reuse

 private:
  struct Spare {
    char* data;
    size_t capacity;
    std::chrono::steady_clock::time_point since;
  };
  char* Allocate(size_t capacity);
  void Release(char* data, size_t capacity);
  // Drops kept buffers oldest first while they and `wanted` would exceed the limit, and those
  // kept too long; returns them, to be destroyed once mu_ is released. Requires mu_.
  std::deque<Ref> TrimKept(uint64_t wanted);
  // Unmaps spare buffers beyond what the budget leaves room for and those unused too long.
  // Requires mu_.
  void TrimSpare();

  // Wakes now and then while memory is kept or spare, to let go of what has sat too long.
  void Trim();

  const uint64_t limit_;
  const Idle idle_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  uint64_t used_ = 0;     // live buffers and reservations
  uint64_t untaken_ = 0;  // of which reserved but not taken yet
  uint64_t kept_bytes_ = 0;
  std::deque<Ref> kept_;
  uint64_t spare_bytes_ = 0;
  std::deque<Spare> spare_;  // newest last
  std::condition_variable trim_wake_;
  bool stopping_ = false;
  std::thread trimmer_;  // last: started once everything else is
};

}  // namespace aprfs
