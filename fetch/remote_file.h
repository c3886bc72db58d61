#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fetch/byte_source.h"
#include "fetch/chunk_cache.h"
#include "fetch/chunk_store.h"
#include "fetch/fetcher.h"
#include "fetch/remote_origin.h"

namespace aprfs {

struct RemoteOptions {
  std::chrono::milliseconds read_deadline{60000};     // a read waits this long, then EIO
  std::chrono::milliseconds request_deadline{60000};  // one HTTP request, per chunk it fetches
  // The largest read-ahead window of a sequential stream: 512 MiB, so that requests of 8 chunks
  // could keep 8 connections busy (also at most half the cache's memory: 128 MiB by default).
  unsigned prefetch_max_chunks = 64;
};

// Which remote file, as logs, status pages and caches name it.
struct RemoteBlob {
  std::string name;      // for logs and errors: hf://ORG/NAME@COMMIT/PATH, s3://BUCKET/KEY
  std::string path;      // its path in the model: a shard's file name in the repo or folder
  uint64_t size = 0;
  std::string sha256;    // when the origin lists it (the Hub's LFS files): verified when complete
  std::string revision;  // what pins it: the Hub's commit, the S3 object's ETag
  std::string identity;  // ByteSource::identity(): the same for the same bytes
  std::string repo_id;   // the Hub repo, for publication into the HF cache; "" elsewhere
};

// A repo file on the Hub at a pinned commit.
RemoteBlob HubBlob(const std::string& repo_id, const std::string& commit, const std::string& path,
                   uint64_t size, const std::string& sha256);

// Counters for status pages and tests.
struct RemoteStats {
  std::atomic<uint64_t> bytes_fetched{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failed_requests{0};
  std::atomic<uint64_t> chunks_fetched{0};
  // Chunks that could not be stored (the cache disk full) and publications that failed.
  std::atomic<uint64_t> cache_errors{0};
};

// A remote file read lazily (from the Hub, an S3 bucket: its RemoteOrigin): a read waits for the
// chunks it touches (fetched once, however many readers wait, and never twice across processes
// thanks to the chunk store's claims); sequential streams get a read-ahead window that doubles
// up to a limit, fetched in requests spanning several chunks once it is wide. Every response is
// validated (206, Content-Range, size, the pinned validator) before a byte is stored; a failed
// attempt stores nothing. The validator the origin knows beforehand (an S3 ETag), or else the
// one the server gives on first contact (its ETag, or Last-Modified), is pinned for the file and
// shared with other processes through the chunk store: later requests carry it (If-Range,
// If-Match), and an answer of another version (another validator, a 200 to If-Range, a 412)
// fails the file's reads with EIO, never mixing versions. When the last chunk arrives,
// `on_complete` runs (verification, publication).
// Downloads go into memory (the cache's ChunkMemory): readers are served from there as soon as a
// chunk's last byte is in, while the commit lane stores it; a stored chunk stays in memory until
// its sequential reader is past it or newer chunks need the room. A chunk the cache cannot store
// (a full disk even after evicting, a failing disk) is served from memory all the same: a full
// disk slows reads, never fails them.
class RemoteFile final : public ByteSource, public std::enable_shared_from_this<RemoteFile> {
 public:
  RemoteFile(RemoteBlob blob, std::unique_ptr<RemoteOrigin> origin,
             std::shared_ptr<ChunkStore> store, ChunkCache& cache, Fetcher& fetcher,
             RemoteOptions options,
             std::function<void(RemoteFile&)> on_complete = {});

  int Read(uint64_t offset, size_t length, char* dst) override;
  // The server gave another version of the file than the one this process reads: every read
  // fails (EIO) from then on.
  bool Changed() const { return version_changed_.load(); }
  uint64_t size() const override { return blob_.size; }
  const std::string& name() const override { return blob_.name; }
  std::string identity() const override { return blob_.identity; }

  // Makes one chunk present without reading it (prefetch): 0, EIO when it cannot be fetched
  // within the read deadline, ECANCELED as soon as `cancelled` says so.
  int Fetch(uint64_t chunk, const std::function<bool()>& cancelled = {});

  // The shard a sequential reader of the .apr continues into after this one: a read-ahead
  // window that runs past our end carries on at its start instead of restarting from nothing.
  void SetNext(std::weak_ptr<RemoteFile> next);

  const RemoteBlob& blob() const { return blob_; }
  ChunkStore& store() { return *store_; }
  const RemoteStats& stats() const { return stats_; }
  // Chunks waiting for a download worker (by why) and being downloaded now, for status pages.
  struct Activity {
    uint64_t queued_demand = 0;
    uint64_t queued_prefetch = 0;
    uint64_t in_flight = 0;
  };
  Activity CurrentActivity();
  // Forgets every chunk (a failed verification): they are fetched again, and the file is
  // verified again once complete.
  void DropAllChunks();
  // The verification could not tell (chunks were evicted while it read): verify again when the
  // next chunk completes the file.
  void VerifyWhenCompleteAgain() { completed_ = false; }
  // A failure to store into the chunk cache or publish into the HF cache, for status pages.
  void NoteCacheError(const std::string& error);
  std::string LastCacheError();

 private:
  enum class Phase { Idle, Queued, Fetching };
  using Buffer = ChunkMemory::Ref;
  struct ChunkState {
    Phase phase = Phase::Idle;
    bool demand = false;     // a reader waits for it
    uint64_t failures = 0;   // attempts that ended in an error, ever
    std::string last_error;
    uint64_t rounds = 0;     // fetches of it that ended, however
    unsigned waiters = 0;    // AwaitChunk calls waiting for it now
    std::weak_ptr<ChunkMemory::Buffer> memory;  // its bytes, while ChunkMemory keeps them
    // Forgotten while still being stored: its memory goes once the disk has it (Forget).
    bool forget_once_stored = false;
  };
  struct Stream {
    uint64_t next = 0;       // where the next sequential read would start
    uint64_t window = 1;     // chunks to keep ahead of it
    std::chrono::steady_clock::time_point used;
  };

  // Follows the read in the streams and schedules their read-ahead; returns what is left of the
  // window for the next shard, and whether the read continues a stream. Requires mu_.
  uint64_t FollowStreams(uint64_t offset, size_t length, bool* sequential);
  // A sequential reader now at `offset` is done with the chunks well behind it: their memory
  // goes (what it read is read). Requires mu_.
  void ForgetPassed(uint64_t offset);
  // A sequential reader has read up to our end: our last chunks' memory goes too.
  void ForgetTheEnd();
  // The chunk's bytes leave memory; while it is still being stored, once the disk has it.
  // Requires mu_.
  void Forget(uint64_t chunk);
  // The chunk's bytes when in memory, else null. Requires mu_.
  Buffer InMemory(uint64_t chunk);
  // Schedules the chunks of `stream`'s window; returns what runs past our end. Requires mu_.
  uint64_t ScheduleWindow(const Stream& stream);
  // Schedules an absent chunk as demand and waits for it: 0, EIO (a failure or the deadline;
  // logged with `what`), or ECANCELED. With `memory`, a chunk in memory counts as arrived (not
  // only a stored one), its bytes put there.
  int AwaitChunk(uint64_t chunk, std::chrono::steady_clock::time_point deadline,
                 const std::function<bool()>& cancelled, const std::string& what,
                 Buffer* memory = nullptr);
  // A stream at our beginning with (at least) `window` chunks of read-ahead: the reader of the
  // previous shard is that close to its end. Passes on what runs past our end.
  void ContinueStream(uint64_t window);
  void Schedule(uint64_t chunk, Fetcher::Priority priority);  // requires mu_
  void RunFetch(uint64_t chunk);
  // The outcome of one HTTP attempt at a chunk.
  struct Attempt {
    std::string error;  // empty: every chunk was handed on
    bool fatal = false;  // retrying cannot help (404, 416, a changed file...)
    HttpResponse response;  // for the retry delay (Retry-After)
  };
  // A chunk downloaded into memory, still to be stored, made durable and marked present.
  struct PendingCommit {
    std::unique_ptr<ChunkStore::Claim> claim;
    uint64_t pin = 0;  // the version of the file its bytes are (ChunkStore::Validator)
    Buffer bytes;
  };
  // What fetching one chunk came to.
  struct Outcome {
    std::string error;  // empty: stored, or `commit` pending
    std::shared_ptr<PendingCommit> commit;  // downloaded: to store on the commit lane
  };
  // The chunk's bytes are in memory: its readers are served from there from now on.
  void Arrived(uint64_t chunk, const Buffer& bytes);
  // Hands a downloaded chunk to the commit lane.
  void SubmitCommit(uint64_t chunk, std::shared_ptr<PendingCommit> commit);
  // On the commit lane: stores the chunk, makes it durable and present, then finishes it.
  void FinishCommit(uint64_t chunk, PendingCommit& commit);
  // The chunk's fetch ended: its state, its waiters, and verification once the file is complete.
  void Finish(uint64_t chunk, Outcome outcome);
  // `made`: the first attempt, made already (FetchAlone).
  Outcome FetchChunk(uint64_t chunk, const Attempt* made = nullptr);
  // The disk is full: pauses read-ahead.
  void NoRoom();
  void LogNoRoom(uint64_t chunk, const std::string& error, const char* action);
  // One request for the claimed chunks (consecutive), into memory: each chunk handed to
  // `on_chunk` (its index in `claims`, the version its bytes are, the bytes) once its last byte
  // is in. Waits for room in the cache's memory first.
  Attempt Download(const std::vector<const ChunkStore::Claim*>& claims,
                   const std::function<void(size_t, uint64_t, Buffer)>& on_chunk);
  // The chunk (fetching) and the queued chunks right after it, marked fetching: what one request
  // fetches. As many as keep every connection busy with the streams' read-ahead, at most
  // kMaxSpanChunks. Requires mu_.
  std::vector<uint64_t> TakeSpan(uint64_t chunk);
  // Chunks taken for a request they were not fetched by: queued again.
  void GiveBack(const std::vector<uint64_t>& chunks);
  // One chunk in its own request(s), retried, then finished; `made`: the first attempt, made
  // already (a request for several chunks that failed in this one).
  void FetchAlone(uint64_t chunk, const Attempt* made = nullptr);
  // Consecutive chunks in one request, each committed as soon as its bytes are stored (long
  // requests are what a store serves cheapest). The chunk a failure stops in is fetched alone
  // (its retries and failures counted there); the rest are queued again.
  void FetchSpan(const std::vector<uint64_t>& span);
  // Whether an answer with validator `got` is of the version this process reads, pinning it at
  // the first answer: empty when it is (*pin: the fingerprint to commit under), else why not.
  std::string CheckVersion(const ServerValidator& got, uint64_t* pin);
  // Bytes just copied from the store: still the version this process reads? (Pins the store's
  // at the first read served.) False, the file marked changed, when not.
  bool ServedVersionOk();
  // The file changed on the server: logged once, and every read fails from then on.
  void NoteChanged(const std::string& why);

  const RemoteBlob blob_;
  const std::unique_ptr<RemoteOrigin> origin_;
  std::shared_ptr<ChunkStore> store_;
  ChunkCache& cache_;
  Fetcher& fetcher_;
  const RemoteOptions options_;
  std::function<void(RemoteFile&)> on_complete_;
  RemoteStats stats_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<uint64_t, ChunkState> chunks_;  // only chunks that were ever scheduled
  std::vector<Stream> streams_;
  std::weak_ptr<RemoteFile> next_;

  // The version this process reads: the fingerprint of the server's validator (0 until the
  // first answer, or the first read served from chunks another process fetched).
  std::mutex pin_mu_;
  std::atomic<uint64_t> pin_{0};
  std::optional<ServerValidator> validator_;  // guarded by pin_mu_; unknown while only pin_ is
  bool send_if_range_ = true;  // guarded by pin_mu_; off once the server mishandles If-Range
  std::atomic<bool> served_{false};   // a read was served
  std::atomic<bool> version_changed_{false};
  std::atomic<bool> completed_{false};

  std::mutex cache_error_mu_;
  std::string last_cache_error_;
  // No read-ahead until then: the disk is full, and read-ahead would evict the chunks readers
  // are about to read. Requires mu_.
  std::chrono::steady_clock::time_point no_room_until_{};
  std::atomic<int64_t> no_room_logged_{0};  // steady_clock ticks of the last warning
};

}  // namespace aprfs
