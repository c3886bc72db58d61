#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/sync/file_lock.hpp>
#include <set>
#include <vector>

namespace aprfs {

// The on-disk cache of one remote file's bytes, shared by every process on the machine (two
// mounts, a mount and `aprfs prefetch`): a sparse `data` file plus a memory-mapped `map` with one
// word per chunk. Readers take no lock: a chunk's word holds a present bit and a generation, and a
// read is valid only if the word is the same before and after it (a seqlock), so an eviction
// racing a read is detected, never served. Filling or evicting a chunk requires an exclusive
// claim: an open-file-description lock on the chunk's byte of `claims`, which the kernel drops if
// the holder dies, so an interrupted download is simply resumed by the next reader. A chunk is
// marked present only after its bytes are on disk (fdatasync), so it survives restarts and
// crashes. Layout: <dir>/{data,map,claims,lock}.
class ChunkStore {
 public:
  // Opens or creates the store for a file of `size` bytes. Creation is serialized across
  // processes; an existing store with another size or chunk size is rebuilt empty. Throws
  // std::runtime_error naming the path on failure.
  static std::shared_ptr<ChunkStore> Open(const std::string& dir, uint64_t size,
                                          uint32_t chunk_size);
  ~ChunkStore();

  const std::string& dir() const { return dir_; }
  uint64_t size() const { return size_; }
  uint32_t chunk_size() const { return chunk_size_; }
  uint64_t chunk_count() const { return chunk_count_; }
  uint64_t ChunkOf(uint64_t offset) const { return offset / chunk_size_; }
  uint64_t ChunkBegin(uint64_t chunk) const { return chunk * chunk_size_; }
  uint64_t ChunkLength(uint64_t chunk) const;

  bool Present(uint64_t chunk) const;
  uint64_t PresentCount() const;
  uint64_t PresentBytes() const;  // the bytes of the present chunks
  bool Complete() const { return PresentCount() == chunk_count_; }
  // Seconds (since the epoch) a chunk was last read or written, for LRU eviction.
  uint32_t LastAccess(uint64_t chunk) const;
  // Every chunk's word (present bit and generation): equal snapshots taken before and after
  // reading the data file mean no chunk was evicted or filled again in between.
  std::vector<uint32_t> Generations() const;

  // Copies [offset, offset+length) when every chunk it touches is present and stays so
  // through the read. Returns 0, ENODATA (some chunk absent, or evicted meanwhile), or EIO.
  // `read_ahead`: whether the kernel may read the data file ahead of the range (a sequential
  // reader served from the disk); off for a read behind its reader, whose next bytes were served
  // already: what the kernel read ahead would stay cached, read by nobody.
  int Read(uint64_t offset, size_t length, char* dst, bool read_ahead = true);

  // The exclusive right to fill or evict one chunk, across processes. Released on destruction.
  class Claim {
   public:
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    uint64_t chunk() const { return chunk_; }

   private:
    friend class ChunkStore;
    Claim(ChunkStore* store, int fd, uint64_t chunk) : store_(store), fd_(fd), chunk_(chunk) {}
    ChunkStore* store_;
    int fd_;
    uint64_t chunk_;
  };
  // Non-blocking: null when another holder (thread of another process, or the evictor) has it.
  std::unique_ptr<Claim> TryClaim(uint64_t chunk);
  // Writes part of the claimed chunk's bytes (`offset` is absolute in the file). Bytes, offset
  // and length aligned to kDirectAlignment go past the page cache (O_DIRECT) where the
  // filesystem allows it.
  static constexpr size_t kDirectAlignment = 4096;
  int Write(const Claim& claim, uint64_t offset, std::string_view bytes);
  // Makes the chunk's bytes durable, then marks it present.
  int Commit(const Claim& claim);
  // The same for several claimed chunks written before: one fdatasync for all.
  int Commit(const std::vector<const Claim*>& claims);
  // A remote chunk downloaded under the server's validator `validator` (see Validator()): marked
  // present only while the store's validator is still that one, ESTALE otherwise (the file
  // changed on the server and another process started over with the new version meanwhile).
  int Commit(const Claim& claim, uint64_t validator);

  // Which version of a remote file the present chunks are: a fingerprint of the validator the
  // server gave with them (its ETag, or Last-Modified), shared by every process; 0 while none
  // is recorded (a new store, or one filled by an older aprfs). One version per store: chunks
  // of two versions of a file never sit side by side.
  uint64_t Validator() const;
  // Records `validator` when none is: true when the store's validator is now `validator`.
  bool AdoptValidator(uint64_t validator);
  // The server now gives another version than the store's chunks are (`validator` instead of
  // `old`): drops every present chunk and records `validator`, in one step against Commit.
  // False when the store's validator is no longer `old`, or the store is published.
  bool ReplaceValidator(uint64_t old, uint64_t validator);
  // Frees what a failed download of the claimed (absent) chunk wrote, so it takes no disk.
  void Discard(const Claim& claim);

  // Drops whatever the page cache holds of the chunk's bytes (its reader is done with them: the
  // kernel's readahead for a read of the data file may have brought in more than was served).
  void DropCached(uint64_t chunk);
  // Drops a present chunk if nobody holds it (punches the hole). True when dropped.
  bool Evict(uint64_t chunk);
  // Drops every chunk (the file failed verification).
  void DropAll();

  // The right to move the complete data file into the HF cache as a blob: marks the store
  // published (from then on the data is never written or punched again; serialized with
  // eviction) and holds a claim the kernel drops if this process dies. Null when the store is
  // incomplete or already published. Keep it until the store's files are removed: Open undoes a
  // publication whose claim nobody holds (its publisher died).
  std::unique_ptr<Claim> ClaimPublication();
  // The publication failed and the data file is still the store's: evictable, writable again.
  void AbandonPublication(const Claim& publication);
  bool Published() const;

  int data_fd() const { return data_fd_; }

 private:
  ChunkStore(std::string dir, uint64_t size, uint32_t chunk_size);
  std::atomic_ref<uint32_t> Word(uint64_t chunk) const;
  std::atomic_ref<uint32_t> Access(uint64_t chunk) const;
  std::atomic_ref<uint32_t> Flags() const;
  std::atomic_ref<uint64_t> ValidatorWord() const;
  // Marks the claimed chunks present (after they are durable). Requires store_mu_ and the lock.
  void MarkPresent(const std::vector<const Claim*>& claims);
  void Release(int fd, uint64_t chunk);
  void Touch(uint64_t chunk);
  void PunchHole(uint64_t chunk);
  // Claims on a separate descriptor: OFD locks only conflict across descriptions, so the
  // evictor never takes a chunk a fetcher of this same process holds.
  std::unique_ptr<Claim> TryClaimOn(int fd, uint64_t chunk);

  const std::string dir_;
  const uint64_t size_;
  const uint32_t chunk_size_;
  const uint64_t chunk_count_;
  int data_fd_ = -1;
  int direct_fd_ = -1;  // the data file opened with O_DIRECT; -1 where the filesystem refuses
  int no_read_ahead_fd_ = -1;  // the data file opened again, with POSIX_FADV_RANDOM
  std::atomic<bool> direct_{true};  // false once a direct write was refused
  int claims_fd_ = -1;
  int evict_fd_ = -1;
  boost::interprocess::file_mapping map_file_;
  boost::interprocess::mapped_region map_;
  uint32_t* words_ = nullptr;  // in the mapping: chunk words, then access times
  // Eviction vs publication: the `lock` file across processes, this mutex within one.
  boost::interprocess::file_lock store_lock_;
  std::mutex store_mu_;
  // Chunks claimed by this process: OFD locks do not exclude threads sharing a description.
  std::mutex claims_mu_;
  std::set<uint64_t> claimed_;
};

}  // namespace aprfs
