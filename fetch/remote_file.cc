#include "fetch/remote_file.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace aprfs {
namespace {

constexpr size_t kMaxStreams = 8;
constexpr auto kCancelPoll = std::chrono::milliseconds(200);
// The most chunks one request fetches: 64 MiB (radosgw served 8 MiB ranges at 0.6x the bytes
// per second of 64 MiB ones).
constexpr uint64_t kMaxSpanChunks = 8;
// After a chunk found no room in the cache: no read-ahead for this long.
constexpr auto kNoRoomPause = std::chrono::seconds(10);

bool IsNoSpace(int err) { return err == ENOSPC || err == EDQUOT; }

// Parses "bytes a-b/total".
bool ParseContentRange(const std::string& text, uint64_t* first, uint64_t* last, uint64_t* total) {
  unsigned long long a, b, t;
  if (std::sscanf(text.c_str(), "bytes %llu-%llu/%llu", &a, &b, &t) != 3) return false;
  *first = a;
  *last = b;
  *total = t;
  return true;
}

}  // namespace

RemoteBlob HubBlob(const std::string& repo_id, const std::string& commit, const std::string& path,
                   uint64_t size, const std::string& sha256) {
  RemoteBlob blob;
  blob.name = "hf://" + repo_id + "@" + commit.substr(0, 12) + "/" + path;
  blob.path = path;
  blob.size = size;
  blob.sha256 = sha256;
  blob.revision = commit;
  blob.identity = sha256.empty() ? "hub:" + repo_id + "@" + commit + "/" + path : "sha256:" + sha256;
  blob.repo_id = repo_id;
  return blob;
}

RemoteFile::RemoteFile(RemoteBlob blob, std::unique_ptr<RemoteOrigin> origin,
                       std::shared_ptr<ChunkStore> store, ChunkCache& cache, Fetcher& fetcher,
                       RemoteOptions options, std::function<void(RemoteFile&)> on_complete)
    : blob_(std::move(blob)),
      origin_(std::move(origin)),
      store_(std::move(store)),
      cache_(cache),
      fetcher_(fetcher),
      options_(options),
      on_complete_(std::move(on_complete)) {
  // A version known beforehand is pinned now: the first answer must already be of it.
  if (std::optional<ServerValidator> known = origin_->KnownVersion()) {
    uint64_t pin = 0;
    if (std::string refusal = CheckVersion(*known, &pin); !refusal.empty()) NoteChanged(refusal);
  }
}

int RemoteFile::Read(uint64_t offset, size_t length, char* dst) {
  if (length == 0) return 0;
  if (offset > blob_.size || length > blob_.size - offset) return EIO;
  if (version_changed_) return EIO;  // said once, when it was found
  const auto deadline = std::chrono::steady_clock::now() + options_.read_deadline;
  const uint64_t first = store_->ChunkOf(offset), last = store_->ChunkOf(offset + length - 1);
  uint64_t carry;
  std::weak_ptr<RemoteFile> next;
  std::vector<Buffer> memory;  // the chunks read, when in memory
  // A read just behind a reader that went past it already (a mapping's faults arrive out of
  // order) has its next bytes served: the data file is not read ahead for it. (A reader far
  // ahead says nothing about this one.)
  bool read_ahead = true;
  bool sequential = false;
  {
    std::lock_guard lock(mu_);
    const uint64_t end = offset + length;
    for (const Stream& stream : streams_) {
      if (stream.next > end && stream.next - end <= 2 * store_->chunk_size()) read_ahead = false;
    }
    carry = FollowStreams(offset, length, &sequential);
    next = next_;
    for (uint64_t chunk = first; chunk <= last; ++chunk) memory.push_back(InMemory(chunk));
  }
  // What is left of the window belongs to the next shard (not under our lock: it has its own).
  if (carry > 0) {
    if (auto file = next.lock()) file->ContinueStream(carry);
  }
  // Piece by piece, a piece from its chunk's memory or from the store; every missing chunk is
  // asked for at once, then waited for in turn: a piece needs only its own chunk, so two chunks
  // the cache cannot hold together (a full disk, a small --cache-size) never evict each other in
  // turn until the deadline.
  struct Piece {
    uint64_t chunk, begin, end;
  };
  std::vector<Piece> missing;
  for (uint64_t chunk = first; chunk <= last; ++chunk) {
    const uint64_t chunk_begin = store_->ChunkBegin(chunk);
    const Piece piece{chunk, std::max(offset, chunk_begin),
                      std::min(offset + length, chunk_begin + store_->ChunkLength(chunk))};
    char* to = dst + (piece.begin - offset);
    if (const Buffer& bytes = memory[chunk - first]) {
      std::memcpy(to, bytes->data() + (piece.begin - chunk_begin), piece.end - piece.begin);
    } else if (int result = store_->Read(piece.begin, piece.end - piece.begin, to, read_ahead)) {
      if (result != ENODATA) return result;
      missing.push_back(piece);
    }
  }
  if (!missing.empty()) {
    std::lock_guard lock(mu_);
    for (const Piece& piece : missing) Schedule(piece.chunk, Fetcher::Priority::Demand);
  }
  const std::string what =
      "read of " + std::to_string(length) + " bytes at " + std::to_string(offset);
  for (const Piece& piece : missing) {
    char* to = dst + (piece.begin - offset);
    int result;
    while ((result = store_->Read(piece.begin, piece.end - piece.begin, to, read_ahead)) ==
           ENODATA) {
      Buffer bytes;
      if (int err = AwaitChunk(piece.chunk, deadline, {}, what, &bytes)) return err;
      if (bytes) {
        std::memcpy(to, bytes->data() + (piece.begin - store_->ChunkBegin(piece.chunk)),
                    piece.end - piece.begin);
        result = 0;
        break;
      }
    }
    if (result != 0) return result;
  }
  if (!ServedVersionOk()) return EIO;
  // A sequential reader at our end is done with us: the chunks the slack of ForgetPassed never
  // reaches go now that they are served (not before: this read needs them).
  if (sequential && offset + length == blob_.size) ForgetTheEnd();
  return 0;
}

RemoteFile::Buffer RemoteFile::InMemory(uint64_t chunk) {
  auto it = chunks_.find(chunk);
  return it == chunks_.end() ? nullptr : it->second.memory.lock();
}

bool RemoteFile::ServedVersionOk() {
  // After the copy: a chunk of a version stored by another process meanwhile comes with that
  // version's validator (it is recorded before such a chunk is marked present).
  const uint64_t stored = store_->Validator();
  uint64_t mine = pin_.load();
  if (stored != 0 && mine == 0) {
    std::lock_guard lock(pin_mu_);
    mine = pin_.load();
    if (mine == 0) pin_ = mine = stored;
  }
  served_ = true;
  // 0: chunks of an older aprfs, which checked them against the sha256 ETag.
  if (stored == 0 || stored == mine) return true;
  NoteChanged("another process found it changed on the server and dropped the chunks of the "
              "version read here");
  return false;
}

int RemoteFile::Fetch(uint64_t chunk, const std::function<bool()>& cancelled) {
  if (chunk >= store_->chunk_count()) return EINVAL;
  const auto deadline = std::chrono::steady_clock::now() + options_.read_deadline;
  while (!store_->Present(chunk)) {
    if (version_changed_) return EIO;
    int result = AwaitChunk(chunk, deadline, cancelled, "chunk " + std::to_string(chunk));
    if (result != 0) return result;
  }
  return 0;
}

int RemoteFile::AwaitChunk(uint64_t chunk, std::chrono::steady_clock::time_point deadline,
                           const std::function<bool()>& cancelled, const std::string& what,
                           Buffer* memory) {
  std::unique_lock lock(mu_);
  if (store_->Present(chunk)) return 0;
  ChunkState& state = chunks_[chunk];  // std::map: stays where it is
  // Failures counted before we asked: only newer ones are about our request.
  const uint64_t failures_seen = state.failures;
  // A fetch that ends without the chunk being there when we look (evicted at once for the
  // limit or the disk, or out of memory already) sends us back to the caller, which asks again:
  // waiting on would wait for nothing until the deadline.
  const uint64_t rounds_seen = state.rounds;
  if (!memory || state.memory.expired()) Schedule(chunk, Fetcher::Priority::Demand);
  ++state.waiters;
  struct Leave {
    ChunkState& state;
    ~Leave() { --state.waiters; }  // mu_ held however we return
  } leave{state};
  auto settled = [&] {
    return (memory && !state.memory.expired()) || state.failures > failures_seen ||
           state.rounds > rounds_seen || store_->Present(chunk);
  };
  for (;;) {
    auto until = deadline;
    // A caller that can be cancelled is looked at five times a second.
    if (cancelled) until = std::min(until, std::chrono::steady_clock::now() + kCancelPoll);
    bool ready = changed_.wait_until(lock, until, settled);
    if (ready && memory && (*memory = state.memory.lock())) return 0;
    if (ready && state.failures > failures_seen) {
      // A change of the file on the server was logged once, when found.
      if (!version_changed_) spdlog::error("{}: {} failed: {}", blob_.name, what, state.last_error);
      return EIO;
    }
    if (ready) return 0;
    if (cancelled && cancelled()) return ECANCELED;
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::error("{}: {} timed out after {} s", blob_.name, what,
                    options_.read_deadline.count() / 1000);
      return EIO;
    }
  }
}

uint64_t RemoteFile::FollowStreams(uint64_t offset, size_t length, bool* sequential) {
  auto now = std::chrono::steady_clock::now();
  const uint64_t slack = store_->chunk_size();
  Stream* stream = nullptr;
  for (Stream& s : streams_) {
    // Readahead requests may arrive slightly out of order: near the end is still sequential.
    if (offset + slack >= s.next && offset <= s.next + slack) {
      stream = &s;
      break;
    }
  }
  *sequential = stream != nullptr;
  if (stream) {
    // Never more read-ahead than a quarter of the cache holds: it would evict what the reader
    // is about to read (and take the cache over its limit while the chunks arrive).
    // Nor more than half the memory downloads go to: the reader would find the chunks ahead of
    // it pushed out of memory by the ones after them.
    uint64_t most = options_.prefetch_max_chunks;
    if (cache_.limit() > 0) {
      most = std::clamp<uint64_t>(cache_.limit() / 4 / store_->chunk_size(), 1, most);
    }
    most = std::clamp<uint64_t>(cache_.memory().limit() / 2 / store_->chunk_size(), 1, most);
    stream->window = std::min<uint64_t>(stream->window * 2, most);
    ForgetPassed(offset);
  } else {
    if (streams_.size() >= kMaxStreams) {
      streams_.erase(std::min_element(streams_.begin(), streams_.end(),
                                      [](const Stream& a, const Stream& b) { return a.used < b.used; }));
    }
    streams_.push_back({offset + length, 1, now});
    stream = &streams_.back();
  }
  stream->next = std::max(stream->next, offset + length);
  stream->used = now;
  if (now < no_room_until_) return 0;
  return ScheduleWindow(*stream);
}

void RemoteFile::ForgetPassed(uint64_t offset) {
  // Readahead requests arrive slightly out of order: a chunk is passed once the reader is
  // half a chunk beyond its end.
  const uint64_t slack = store_->chunk_size() / 2;
  if (offset >= store_->chunk_size() + slack) Forget(store_->ChunkOf(offset - slack) - 1);
}

void RemoteFile::ForgetTheEnd() {
  std::lock_guard lock(mu_);
  const uint64_t last = store_->chunk_count() - 1;
  Forget(last);
  if (last > 0) Forget(last - 1);
}

void RemoteFile::Forget(uint64_t chunk) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return;
  ChunkState& state = it->second;
  // Still being stored: readers keep the bytes from memory until the disk has them, and if the
  // disk cannot take them (full), memory stays their only copy (FinishCommit).
  if (state.phase == Phase::Fetching) {
    if (!state.memory.expired()) state.forget_once_stored = true;
    return;
  }
  if (Buffer bytes = state.memory.lock()) {
    cache_.memory().Forget(bytes.get());
    // Reads of it that missed memory (out of order) read the data file, and the kernel's
    // readahead brought in pages nobody served from there: they go too.
    store_->DropCached(chunk);
  }
  state.memory.reset();
}

uint64_t RemoteFile::ScheduleWindow(const Stream& stream) {
  uint64_t window = stream.window;
  if (stream.next < blob_.size) {
    uint64_t from = store_->ChunkOf(stream.next);
    uint64_t to = std::min(store_->chunk_count() - 1, from + window - 1);
    for (uint64_t chunk = from; chunk <= to; ++chunk) {
      if (!store_->Present(chunk)) Schedule(chunk, Fetcher::Priority::Prefetch);
    }
    window -= std::min(window, to - from + 1);
  }
  return next_.expired() ? 0 : window;
}

RemoteFile::Activity RemoteFile::CurrentActivity() {
  std::lock_guard lock(mu_);
  Activity activity;
  for (const auto& [chunk, state] : chunks_) {
    if (state.phase == Phase::Fetching) ++activity.in_flight;
    if (state.phase != Phase::Queued) continue;
    ++(state.demand ? activity.queued_demand : activity.queued_prefetch);
  }
  return activity;
}

void RemoteFile::DropAllChunks() {
  store_->DropAll();
  {
    std::lock_guard lock(mu_);
    for (auto& [chunk, state] : chunks_) {
      if (Buffer bytes = state.memory.lock()) cache_.memory().Forget(bytes.get());
      state.memory.reset();
    }
  }
  completed_ = false;
}

void RemoteFile::NoteCacheError(const std::string& error) {
  stats_.cache_errors++;
  std::lock_guard lock(cache_error_mu_);
  last_cache_error_ = error;
}

std::string RemoteFile::LastCacheError() {
  std::lock_guard lock(cache_error_mu_);
  return last_cache_error_;
}

void RemoteFile::SetNext(std::weak_ptr<RemoteFile> next) {
  std::lock_guard lock(mu_);
  next_ = std::move(next);
}

void RemoteFile::ContinueStream(uint64_t window) {
  uint64_t carry = 0;
  std::weak_ptr<RemoteFile> next;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now < no_room_until_) return;
    Stream* stream = nullptr;
    for (Stream& s : streams_) {
      if (s.next < store_->chunk_size()) {  // carried here before, or the reader just arrived
        stream = &s;
        break;
      }
      // The reader is already in the window: its own reads lead it on.
      if (s.next <= window * store_->chunk_size()) return;
    }
    if (!stream) {
      if (streams_.size() >= kMaxStreams) streams_.erase(streams_.begin());
      streams_.push_back({0, window, now});
      stream = &streams_.back();
    }
    // The reader comes closer to our start with every read: the window it carries grows.
    stream->window = std::max(stream->window, window);
    stream->used = now;
    carry = ScheduleWindow(*stream);
    next = next_;
  }
  if (carry > 0) {
    if (auto file = next.lock()) file->ContinueStream(carry);
  }
}

void RemoteFile::Schedule(uint64_t chunk, Fetcher::Priority priority) {
  ChunkState& state = chunks_[chunk];
  bool demand = priority == Fetcher::Priority::Demand;
  if (state.phase == Phase::Fetching) return;
  if (state.phase == Phase::Queued && (state.demand || !demand)) return;
  // Idle, or queued as prefetch and now awaited: queue it (again) at this priority; whichever
  // task runs first does the work, the other finds it done.
  state.phase = Phase::Queued;
  state.demand = state.demand || demand;
  std::weak_ptr<RemoteFile> self = weak_from_this();
  fetcher_.Submit(priority, [self, chunk] {
    if (auto file = self.lock()) file->RunFetch(chunk);
  });
}

void RemoteFile::RunFetch(uint64_t chunk) {
  std::vector<uint64_t> span;
  {
    std::lock_guard lock(mu_);
    ChunkState& state = chunks_[chunk];
    if (state.phase != Phase::Queued) return;  // done by a twin task
    state.phase = Phase::Fetching;
    span = TakeSpan(chunk);
  }
  if (span.size() > 1) {
    FetchSpan(span);
  } else {
    FetchAlone(chunk);
  }
}

std::vector<uint64_t> RemoteFile::TakeSpan(uint64_t chunk) {
  // The widest read-ahead window shared among the connections: a window of 16 chunks and 8
  // connections makes requests of 2 chunks, as many requests as connections.
  uint64_t window = 1;
  for (const Stream& stream : streams_) window = std::max(window, stream.window);
  const uint64_t most = std::clamp<uint64_t>(window / std::max(1u, fetcher_.workers()), 1,
                                             kMaxSpanChunks);
  // Queued chunks, and beyond the window's end ones nobody asked for yet: a stream whose window
  // is that wide reads on (a stream at the window's end otherwise adds one chunk at a time, and
  // its requests would stay one chunk long).
  std::vector<uint64_t> span{chunk};
  for (uint64_t next = chunk + 1; span.size() < most && next < store_->chunk_count(); ++next) {
    ChunkState& state = chunks_[next];
    if (state.phase == Phase::Fetching || store_->Present(next)) break;
    state.phase = Phase::Fetching;  // a task queued for it finds it taken
    span.push_back(next);
  }
  return span;
}

void RemoteFile::GiveBack(const std::vector<uint64_t>& chunks) {
  std::lock_guard lock(mu_);
  for (uint64_t chunk : chunks) {
    ChunkState& state = chunks_[chunk];
    const bool demand = state.demand || state.waiters > 0;
    state.phase = Phase::Idle;
    state.demand = false;
    Schedule(chunk, demand ? Fetcher::Priority::Demand : Fetcher::Priority::Prefetch);
  }
}

void RemoteFile::FetchSpan(const std::vector<uint64_t>& span) {
  // Claimed in order; the request ends before a chunk another process holds or has stored.
  std::vector<std::unique_ptr<ChunkStore::Claim>> claims;
  for (uint64_t chunk : span) {
    if (store_->Present(chunk)) break;
    std::unique_ptr<ChunkStore::Claim> claim = store_->TryClaim(chunk);
    if (!claim || store_->Present(chunk)) break;
    claims.push_back(std::move(claim));
  }
  if (claims.size() < 2) {
    claims.clear();
    GiveBack(std::vector<uint64_t>(span.begin() + 1, span.end()));
    FetchAlone(span.front());
    return;
  }
  GiveBack(std::vector<uint64_t>(span.begin() + claims.size(), span.end()));
  std::vector<const ChunkStore::Claim*> parts;
  for (const auto& claim : claims) {
    parts.push_back(claim.get());
    (void)cache_.Reserve(store_->ChunkLength(claim->chunk()));
  }
  size_t handed = 0;  // chunks downloaded and handed to the commit lane
  Attempt result = Download(parts, [&](size_t index, uint64_t pin, Buffer bytes) {
    const uint64_t chunk = claims[index]->chunk();
    SubmitCommit(chunk, std::make_shared<PendingCommit>(
                            PendingCommit{std::move(claims[index]), pin, std::move(bytes)}));
    handed = index + 1;
  });
  if (handed == claims.size()) return;
  // Cut short: the chunk it stopped in is fetched alone (as any chunk would be after a failed
  // attempt) and the rest are queued again.
  const uint64_t stopped = claims[handed]->chunk();
  std::vector<uint64_t> rest;
  for (size_t i = handed; i < claims.size(); ++i) {
    cache_.Release(store_->ChunkLength(claims[i]->chunk()), /*stored=*/false);
    if (i > handed) rest.push_back(claims[i]->chunk());
  }
  claims.clear();
  spdlog::debug("{}: the request for chunks {}-{} stopped in chunk {}", blob_.name, span.front(),
                span.front() + parts.size() - 1, stopped);
  GiveBack(rest);
  FetchAlone(stopped, &result);
}

void RemoteFile::FetchAlone(uint64_t chunk, const Attempt* made) {
  Outcome outcome;
  if (!store_->Present(chunk)) outcome = FetchChunk(chunk, made);
  if (outcome.commit) {
    SubmitCommit(chunk, std::move(outcome.commit));
    return;
  }
  Finish(chunk, std::move(outcome));
}

void RemoteFile::Arrived(uint64_t chunk, const Buffer& bytes) {
  {
    std::lock_guard lock(mu_);
    ChunkState& state = chunks_[chunk];
    state.memory = bytes;
    state.forget_once_stored = false;
  }
  changed_.notify_all();
}

void RemoteFile::SubmitCommit(uint64_t chunk, std::shared_ptr<PendingCommit> commit) {
  // Readers take the bytes from memory now. Stored, durable and present off this worker: its
  // connection goes on with the next request while the disk writes and syncs (fdatasync took
  // 30-70 ms of every 320 ms download with 8 connections). The chunk stays "fetching" until
  // then: nobody downloads it twice.
  Arrived(chunk, commit->bytes);
  fetcher_.Submit(Fetcher::Lane::Commit, [self = shared_from_this(), chunk, commit] {
    self->FinishCommit(chunk, *commit);
  });
}

void RemoteFile::FinishCommit(uint64_t chunk, PendingCommit& commit) {
  const uint64_t length = store_->ChunkLength(chunk);
  // Whole pages of the buffer: the file's last chunk ends in the middle of one, and is written
  // in two parts (the tail through the page cache).
  const std::string_view bytes(commit.bytes->data(), length);
  const size_t whole = length / ChunkStore::kDirectAlignment * ChunkStore::kDirectAlignment;
  auto store = [&] {
    int err = store_->Write(*commit.claim, store_->ChunkBegin(chunk), bytes.substr(0, whole));
    if (err == 0 && whole < length) {
      err = store_->Write(*commit.claim, store_->ChunkBegin(chunk) + whole, bytes.substr(whole));
    }
    return err != 0 ? err : store_->Commit(*commit.claim, commit.pin);
  };
  auto describe = [&](int err) {
    return "cannot write the chunk cache " + store_->dir() + "/data: " + std::strerror(err);
  };
  int err = store();
  if (IsNoSpace(err) && cache_.MakeRoom(length) > 0) {
    LogNoRoom(chunk, describe(err), "older chunks evicted");
    err = store();
  }
  Outcome outcome;
  if (err == 0) {
    stats_.bytes_fetched += length;
    stats_.chunks_fetched++;
  } else {
    store_->Discard(*commit.claim);
    const std::string what = describe(err);
    if (err == ESTALE) {
      outcome.error = "the file changed on the server (another process found it and dropped the "
                      "chunks of the version read here)";
      NoteChanged(outcome.error);
    } else {
      // Not the server's failure: readers are served from memory meanwhile; `aprfs prefetch`,
      // which needs the chunk stored, fails.
      outcome.error = what;
      NoteCacheError(what);
      if (IsNoSpace(err)) {
        NoRoom();
        LogNoRoom(chunk, what, "read-ahead paused; readers are served from memory");
      } else {
        spdlog::warn("{}: chunk {}: {}; readers are served from memory", blob_.name, chunk, what);
      }
    }
  }
  cache_.Release(length, /*stored=*/err == 0);
  commit.claim.reset();
  // Kept for later readers, stored or not; never bytes of a version this process does not read
  // or dropped meanwhile (DropAllChunks), nor stored ones a sequential reader went past while
  // they were being stored (the usual order: kept, they would fill the budget with bytes nobody
  // reads, and each cold read would touch all of it afresh, a page fault per 4 KiB).
  bool keep;
  {
    std::lock_guard lock(mu_);
    ChunkState& state = chunks_[chunk];
    const bool passed = err == 0 && state.forget_once_stored;
    keep = err != ESTALE && !passed && state.memory.lock() == commit.bytes;
    if (passed) state.memory.reset();
    state.forget_once_stored = false;
  }
  if (keep) cache_.memory().Keep(std::move(commit.bytes));
  commit.bytes.reset();
  Finish(chunk, std::move(outcome));
}

void RemoteFile::Finish(uint64_t chunk, Outcome outcome) {
  {
    std::lock_guard lock(mu_);
    ChunkState& state = chunks_[chunk];
    state.phase = Phase::Idle;
    state.demand = false;
    ++state.rounds;
    if (!outcome.error.empty()) {
      ++state.failures;
      state.last_error = outcome.error;
    }
  }
  changed_.notify_all();
  if (outcome.error.empty() && store_->Complete() && !completed_.exchange(true) && on_complete_) {
    on_complete_(*this);
  }
}

void RemoteFile::NoRoom() {
  std::lock_guard lock(mu_);
  no_room_until_ = std::chrono::steady_clock::now() + kNoRoomPause;
}

void RemoteFile::LogNoRoom(uint64_t chunk, const std::string& error, const char* action) {
  // Loudly once in a while, then quietly while the disk stays full.
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t last = no_room_logged_.load();
  const bool loud = now - last >= std::chrono::nanoseconds(kNoRoomPause).count() &&
                    no_room_logged_.compare_exchange_strong(last, now);
  spdlog::log(loud ? spdlog::level::warn : spdlog::level::debug, "{}: chunk {}: {}; {}", blob_.name,
              chunk, error, action);
}

RemoteFile::Outcome RemoteFile::FetchChunk(uint64_t chunk, const Attempt* made) {
  static const std::string kStopping = "the mount is stopping";
  auto failed = [](std::string error) {
    Outcome outcome;
    outcome.error = std::move(error);
    return outcome;
  };
  const auto deadline = std::chrono::steady_clock::now() + options_.request_deadline;
  // Another process may be downloading this chunk: wait for it rather than fetch twice.
  std::unique_ptr<ChunkStore::Claim> claim;
  while (!(claim = store_->TryClaim(chunk))) {
    if (store_->Present(chunk)) return {};
    if (std::chrono::steady_clock::now() > deadline) {
      return failed("chunk " + std::to_string(chunk) +
                    " is still being downloaded by another process");
    }
    if (!fetcher_.Pause(std::chrono::milliseconds(20))) return failed(kStopping);
  }
  if (store_->Present(chunk)) return {};
  const uint64_t length = store_->ChunkLength(chunk);
  // Stored whatever Reserve says: a disk full of other files is met when the chunk is stored.
  (void)cache_.Reserve(length);
  Outcome outcome;
  uint64_t pin = 0;  // the version of the file the bytes are
  Buffer bytes;
  for (int attempt = 1;; ++attempt) {
    // The first attempt may be a request for several chunks that failed in this one.
    Attempt result = made ? *made : Download({claim.get()}, [&](size_t, uint64_t got, Buffer in) {
      pin = got;
      bytes = std::move(in);
    });
    made = nullptr;
    outcome.error = result.error;
    if (outcome.error.empty() || result.fatal || fetcher_.Stopping()) break;
    if (attempt >= origin_->max_attempts()) break;  // no backoff after the last attempt
    const auto delay = RetryDelay(attempt - 1, result.response);
    if (std::chrono::steady_clock::now() + delay > deadline) break;
    spdlog::warn("{}: chunk {}: {} (attempt {}, next in {} ms)", blob_.name, chunk, outcome.error,
                 attempt, delay.count());
    if (!fetcher_.Pause(delay)) break;
  }
  if (outcome.error.empty()) {
    // In memory, to be stored, made durable and present (the commit lane): the reservation
    // ends then.
    outcome.commit =
        std::make_shared<PendingCommit>(PendingCommit{std::move(claim), pin, std::move(bytes)});
    return outcome;
  }
  cache_.Release(length, /*stored=*/false);
  if (fetcher_.Stopping()) return failed(kStopping);
  return outcome;
}

RemoteFile::Attempt RemoteFile::Download(
    const std::vector<const ChunkStore::Claim*>& claims,
    const std::function<void(size_t, uint64_t, Buffer)>& on_chunk) {
  const uint64_t begin = store_->ChunkBegin(claims.front()->chunk());
  uint64_t length = 0;
  for (const ChunkStore::Claim* claim : claims) length += store_->ChunkLength(claim->chunk());
  // Room for every chunk of the request before it starts: a response is never stalled (and
  // timed out) waiting for memory.
  std::optional<ChunkMemory::Reservation> memory =
      cache_.memory().Reserve(length, [this] { return fetcher_.Stopping(); });
  if (!memory) return {"the mount is stopping", true, {}};
  // The pinned version only: a server whose file changed answers with the whole new file
  // (refused at its headers, before a byte is stored).
  uint64_t sent_pin = 0;
  std::optional<ServerValidator> if_range;
  {
    std::lock_guard lock(pin_mu_);
    sent_pin = pin_;
    if (sent_pin != 0 && validator_ && validator_->UsableInIfRange() && send_if_range_) {
      if_range = validator_;
    }
  }
  OriginRequest origin_request;
  try {
    origin_request = origin_->RangeRequest(begin, length, if_range ? &*if_range : nullptr);
  } catch (const OriginError& e) {
    return {e.what(), e.fatal(), {}};
  }
  HttpRequest& request = origin_request.http;
  // (An origin that pins versions with If-Match instead answers a change with 412.)
  const bool sent_if_range =
      std::any_of(request.headers.begin(), request.headers.end(),
                  [](const std::string& header) { return header.rfind("If-Range:", 0) == 0; });
  // Each chunk gets the deadline (a stall fails sooner: HttpRequest::stall_timeout).
  request.deadline = options_.request_deadline * static_cast<int64_t>(claims.size());
  request.cancelled = [this] { return fetcher_.Stopping(); };
  std::string refusal;
  bool changed = false;       // the answer is of another version of the file
  bool fatal_refusal = false;  // retrying cannot help
  uint64_t commit_pin = 0;     // the version the chunk is stored as
  uint64_t received = 0;
  const std::optional<ServerValidator> known = origin_->KnownVersion();
  request.on_headers = [&](const HttpResponse& head) {
    ServerValidator got = ServerValidator::Of(head);
    // An answer without a validator to a request that demanded the known version (If-Match)
    // is of that version.
    if (got.kind == ServerValidator::Kind::None && known) got = *known;
    if (head.status == 412) {  // a precondition some proxy checked for us
      refusal = "the file changed on the server (412 Precondition Failed)";
      changed = true;
      return false;
    }
    if (head.status == 200 && sent_if_range) {
      if (got.Fingerprint() != sent_pin) {
        refusal = CheckVersion(got, &commit_pin);
        if (refusal.empty()) refusal = "the file changed on the server";  // (cannot happen)
        refusal += " (the whole file in answer to If-Range)";
        changed = true;
        return false;
      }
      // Same validator, yet the whole file: this server mishandles If-Range. Answers are
      // still checked one by one.
      std::lock_guard lock(pin_mu_);
      if (send_if_range_) {
        send_if_range_ = false;
        spdlog::warn("{}: the server answers If-Range: {} with the whole file although that is "
                     "its validator; If-Range is no longer sent, each answer's is checked",
                     blob_.name, validator_ ? validator_->value : "");
      }
      refusal = "the server ignored the Range header (200)";
      return false;
    }
    if (head.status != 206) {
      refusal = head.status == 200 ? "the server ignored the Range header (200)"
                                   : "HTTP " + std::to_string(head.status);
      return false;
    }
    // A version already pinned is checked first: a changed file explains a wrong size too.
    if (pin_ != 0) {
      refusal = CheckVersion(got, &commit_pin);
      if (!refusal.empty()) return changed = true, false;
    }
    if (origin_request.refuse) {
      refusal = origin_request.refuse(got);
      if (!refusal.empty()) return fatal_refusal = true, false;
    }
    uint64_t first, last, total;
    if (!ParseContentRange(head.Header("content-range"), &first, &last, &total) ||
        first != begin || last != begin + length - 1 || total != blob_.size) {
      refusal = "wrong Content-Range \"" + head.Header("content-range") + "\" for bytes " +
                std::to_string(begin) + "-" + std::to_string(begin + length - 1) + "/" +
                std::to_string(blob_.size);
      return false;
    }
    if (commit_pin == 0) {  // the first answer: pins it
      refusal = CheckVersion(got, &commit_pin);
      if (!refusal.empty()) return changed = true, false;
    }
    return true;
  };
  // Each chunk into a buffer of its own, handed on as soon as its last byte is in.
  size_t part = 0;  // the chunk the body is in now (index in `claims`)
  Buffer filling;
  request.on_body = [&](std::string_view bytes) {
    if (received + bytes.size() > length) return false;
    received += bytes.size();
    while (!bytes.empty()) {
      const uint64_t chunk_length = store_->ChunkLength(claims[part]->chunk());
      if (!filling) filling = memory->Take(chunk_length);
      const size_t take = std::min<uint64_t>(chunk_length - filling->size(), bytes.size());
      filling->Append(bytes.data(), take);
      bytes.remove_prefix(take);
      if (filling->size() == chunk_length) {
        on_chunk(part, commit_pin, std::move(filling));
        filling.reset();
        ++part;
      }
    }
    return true;
  };
  stats_.requests++;
  Attempt result;
  result.response = ThreadHttpSession().Perform(request);
  const HttpResponse& response = result.response;
  if (response.complete() && response.status == 206 && received == length) return result;
  stats_.failed_requests++;
  long status = response.status;
  result.error = !refusal.empty() ? refusal : response.Describe();
  if (changed) {
    NoteChanged(refusal);
    result.fatal = true;
    return result;
  }
  result.fatal = fatal_refusal;
  if (response.complete() && refusal.empty() && status == 206) {
    result.error = "short body: " + std::to_string(received) + " of " + std::to_string(length) +
                   " bytes";
  }
  if (origin_request.retryable && !origin_request.retryable(status, result.error)) {
    result.fatal = true;
  }
  return result;
}

std::string RemoteFile::CheckVersion(const ServerValidator& got, uint64_t* pin) {
  const uint64_t fingerprint = got.Fingerprint();
  std::lock_guard lock(pin_mu_);
  for (int attempt = 0; pin_ == 0 && attempt < 3; ++attempt) {
    // The first answer: the version this process reads from now on, shared through the store
    // with every process that reads this file.
    if (store_->AdoptValidator(fingerprint)) {
      pin_ = fingerprint;
      validator_ = got;
      if (got.kind == ServerValidator::Kind::None) {
        spdlog::warn("{}: the server gives no ETag or Last-Modified: a change of the file on the "
                     "server while it is read cannot be told before its sha256 is checked",
                     blob_.name);
      } else {
        spdlog::debug("{}: pinned {}", blob_.name, got.Describe());
      }
      break;
    }
    // The chunk cache holds another version. None of it served here yet: start over with this
    // one (a process reading that version finds out at its next read).
    if (served_) break;
    if (store_->ReplaceValidator(store_->Validator(), fingerprint)) {
      spdlog::warn("{}: the server gives {}, another version than the chunk cache holds: those "
                   "chunks are dropped", blob_.name, got.Describe());
      pin_ = fingerprint;
      validator_ = got;
    }
  }
  if (pin_ == fingerprint) {
    if (!validator_) validator_ = got;  // pinned from the store: now we know the value too
    *pin = fingerprint;
    return "";
  }
  // The old version is gone from the server: its chunks go too, so that the next mount reads
  // the new one rather than failing on them (a process still reading the old one fails at its
  // next read). No-op when another process replaced it already.
  if (pin_ != 0) store_->ReplaceValidator(pin_, fingerprint);
  if (validator_) {
    return "the file changed on the server (" + validator_->Describe() + " when first read, now " +
           got.Describe() + ")";
  }
  return "the file changed on the server (now " + got.Describe() +
         ", not the version in the chunk cache that was read here)";
}

void RemoteFile::NoteChanged(const std::string& why) {
  if (version_changed_.exchange(true)) return;
  spdlog::error("{}: {}; every read of it fails with EIO from now on, so that no reader gets a "
                "mix of two versions (the chunks of the old one are dropped: mount again to read "
                "the new one)",
                blob_.name, why);
}

}  // namespace aprfs
