#include "tests/integration/load_readers.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <sstream>

#include "fetch/local_model.h"
#include "format/views/model_import.h"
#include "fs/footer_crc.h"
#include "tests/support/materialize.h"

namespace aprfs_itest {

// ----- the expected file -----------------------------------------------------------------------

void BuildExpectedApr(const std::string& dir, const std::string& name,
                      const std::string& source_uri, const tw::TestModel& model, AprVersion* out) {
  aprfs::FilePlan plan;
  std::vector<std::string> shard_bytes;
  try {
    aprfs::LoadedModel loaded = aprfs::LoadLocalModel(dir, name, source_uri);
    plan = aprfs::ImportShardSet(loaded.set).plan;
    for (const aprfs::Shard& shard : loaded.set.shards) {
      shard_bytes.push_back(SlurpOrEmpty(dir + "/" + shard.file));
    }
    out->bytes = tw::MaterializePlan(plan, shard_bytes);
  } catch (const std::exception& e) {
    FAIL() << "cannot build the expected .apr of " << dir << ": " << e.what();
  }
  AprLayout layout = ParseAprBytes(out->bytes);
  ASSERT_NO_FATAL_FAILURE(ExpectLayoutMatches(layout, ExpectedOf(model)));
  ExpectTensorBytes(layout, ExpectedOf(model), out->bytes, "expected .apr of " + dir);

  std::set<uint64_t> marks = {0,
                              64,
                              layout.metadata_offset,
                              layout.metadata_offset + layout.metadata_size,
                              layout.index_offset,
                              layout.data_offset,
                              plan.footer_offset,
                              plan.total_size};
  out->shard_ranges.assign(shard_bytes.size(), {});
  for (const aprfs::DataExtent& e : plan.extents) {
    marks.insert(e.offset);
    marks.insert(e.offset + e.length);
    out->shard_ranges.at(e.source).emplace_back(e.offset, e.offset + e.length);
  }
  for (uint64_t at = aprfs::FooterCrc::kBlockSize; at < plan.footer_offset;
       at += aprfs::FooterCrc::kBlockSize) {
    marks.insert(at);
  }
  out->boundaries.assign(marks.begin(), marks.end());
}

// ----- outcomes ---------------------------------------------------------------------------------

const char* OutcomeName(int outcome) {
  switch (outcome) {
    case kEio: return "EIO";
    case kNotConnected: return "ENOTCONN";
    case kAborted: return "ECONNABORTED";
    case kNoEntry: return "ENOENT";
    case kSigbus: return "SIGBUS";
    default: return "other error";
  }
}

uint64_t ReaderStats::Errors(bool after_event) const {
  uint64_t total = 0;
  for (const auto& count : errors[after_event]) total += count.load();
  return total;
}

std::string ReaderStats::ErrorSummary(bool after_event) const {
  std::string text;
  for (int k = 0; k < kOutcomeCount; ++k) {
    uint64_t n = errors[after_event][k].load();
    if (n == 0) continue;
    if (!text.empty()) text += ", ";
    text += std::string(OutcomeName(k)) + " x" + std::to_string(n);
    if (k == kOtherError) text += " (last: " + std::string(std::strerror(other_errno.load())) + ")";
  }
  return text.empty() ? "none" : text;
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

int OutcomeOf(int err) {
  switch (err) {
    case EIO: return kEio;
    case ENOTCONN: return kNotConnected;
    case ECONNABORTED: return kAborted;
    case ENOENT: return kNoEntry;
    default: return kOtherError;
  }
}

bool ConnectionLost(int err) { return err == ENOTCONN || err == ECONNABORTED; }

struct ReadResult {
  uint64_t count = 0;  // bytes obtained before the end of file or the error
  int error = 0;
};

// pread until `length` bytes, the end of file or an error; keeps what came before an error
// (a kernel read split into several FUSE requests returns the bytes of those that succeeded).
ReadResult ReadFull(int fd, char* dst, uint64_t length, uint64_t offset) {
  ReadResult r;
  while (r.count < length) {
    ssize_t n = ::pread(fd, dst + r.count, length - r.count, static_cast<off_t>(offset + r.count));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = errno;
      break;
    }
    if (n == 0) break;
    r.count += static_cast<uint64_t>(n);
  }
  return r;
}

// SIGBUS of a mapper process: a page the daemon could not supply. Mappers are single-threaded.
sigjmp_buf g_bus_jump;
volatile sig_atomic_t g_bus_armed = 0;

void OnSigbus(int sig) {
  if (g_bus_armed) {
    g_bus_armed = 0;
    siglongjmp(g_bus_jump, 1);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

// ----- the pool ---------------------------------------------------------------------------------

namespace {

struct Role {
  bool shared;   // pread on one descriptor with the other readers of this role
  bool direct;   // O_DIRECT: every read reaches the daemon at its exact offset and length
  bool reopens;  // opens the file again every few dozen reads and after an error
};
constexpr bool kShared = true, kDirect = true, kReopens = true;
// Thread k has role kRoles[k % 6]: with 16 threads, three of each of the first four and two of
// each of the reopening ones.
constexpr Role kRoles[6] = {
    {!kShared, !kDirect, !kReopens}, {!kShared, kDirect, !kReopens},
    {kShared, !kDirect, !kReopens},  {kShared, kDirect, !kReopens},
    {!kShared, !kDirect, kReopens},  {!kShared, kDirect, kReopens},
};
const Role& RoleOf(int reader) { return kRoles[reader % 6]; }

}  // namespace

struct ReaderPool::Handle {
  Fd fd;
  std::atomic<uint32_t> mask{0};  // versions this descriptor may still be showing
  bool before_event = false;      // opened before MarkEvent
  bool direct = false;
};

struct ReaderPool::Slot {
  int flags = O_RDONLY;
  std::mutex mu;
  std::shared_ptr<Handle> current;
};

struct ReaderPool::Shared {
  std::atomic<bool> stop{false};
  std::atomic<bool> event{false};
  std::atomic<int64_t> event_done_ns{0};
  ReaderStats readers[64];
};

ReaderPool::ReaderPool(std::string path, std::vector<const AprVersion*> versions,
                       ReaderOptions options, std::function<void()> on_hang)
    : path_(std::move(path)),
      versions_(std::move(versions)),
      options_(options),
      on_hang_(std::move(on_hang)) {
  std::set<uint64_t> marks;
  for (const AprVersion* v : versions_) marks.insert(v->boundaries.begin(), v->boundaries.end());
  boundaries_.assign(marks.begin(), marks.end());
  if (size() > 64 || versions_.empty() || versions_.size() > 32) {
    throw std::invalid_argument("ReaderPool: 1 to 32 versions, at most 64 readers");
  }
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
  if (memory == MAP_FAILED) throw std::runtime_error("mmap of the shared counters failed");
  shared_ = new (memory) Shared();
  // Slot 0 and 1: the shared buffered and shared O_DIRECT descriptors; then one per reader.
  for (int flags : {O_RDONLY, O_RDONLY | O_DIRECT}) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->flags = flags;
  }
  for (int r = 0; r < options_.threads; ++r) {
    const Role& role = RoleOf(r);
    if (role.shared) {
      slot_of_.push_back(role.direct ? 1 : 0);
    } else {
      slots_.push_back(std::make_unique<Slot>());
      slots_.back()->flags = O_RDONLY | (role.direct ? O_DIRECT : 0);
      slot_of_.push_back(static_cast<int>(slots_.size()) - 1);
    }
  }
}

ReaderPool::~ReaderPool() {
  Stop();
  shared_->~Shared();
  munmap(shared_, sizeof(Shared));
}

const ReaderStats& ReaderPool::stats(int reader) const { return shared_->readers[reader]; }

bool ReaderPool::IsDirect(int reader) const { return !IsMapper(reader) && RoleOf(reader).direct; }

bool ReaderPool::Reopens(int reader) const {
  return !IsMapper(reader) && RoleOf(reader).reopens && options_.reopen_often;
}

std::string ReaderPool::Describe(int reader) const {
  std::string text = "reader " + std::to_string(reader) + " (";
  if (IsMapper(reader)) return text + "process reading a MAP_SHARED mapping)";
  const Role& role = RoleOf(reader);
  text += role.shared ? "shared descriptor, " : "own descriptor, ";
  text += role.direct ? "O_DIRECT, " : "buffered, ";
  text += Reopens(reader) ? "reopens it often)" : "keeps it)";
  return text;
}

void ReaderPool::Start() {
  started_ = true;
  // Processes first: fork() copies only the calling thread.
  for (int r = options_.threads; r < size(); ++r) {
    mappers_.push_back(StartChild([this, r] { return MapperLoop(r); }));
  }
  for (int r = 0; r < options_.threads; ++r) threads_.emplace_back([this, r] { ThreadLoop(r); });
  monitor_ = std::thread([this] { Monitor(); });
}

void ReaderPool::MarkEvent() { shared_->event = true; }

void ReaderPool::MarkEventDone(std::vector<std::pair<uint64_t, uint64_t>> must_fail) {
  must_fail_ = std::move(must_fail);  // read by the threads only once event_done_ns is set
  shared_->event_done_ns = NowNs();
}

void ReaderPool::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  shared_->stop = true;
  for (std::thread& t : threads_) t.join();
  for (auto& slot : slots_) slot->current.reset();  // close the descriptors
  for (size_t m = 0; m < mappers_.size(); ++m) {
    ProcResult r = WaitChild(mappers_[m], std::chrono::seconds(30));
    if (r.exit_code != 0) {
      problems_.push_back(Describe(options_.threads + static_cast<int>(m)) + ": " + r.Describe());
    }
  }
  monitor_stop_ = true;
  monitor_.join();
}

bool ReaderPool::WaitForAll(const std::function<bool(const ReaderStats&)>& done,
                            std::chrono::milliseconds timeout) const {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (int r = 0; r < size() && all; ++r) all = done(stats(r));
    if (all) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int ReaderPool::InRead() const {
  int n = 0;
  for (int r = 0; r < size(); ++r) n += stats(r).in_read_since_ns.load() != 0;
  return n;
}

uint64_t ReaderPool::TotalReads() const {
  uint64_t n = 0;
  for (int r = 0; r < size(); ++r) n += stats(r).reads.load();
  return n;
}

uint64_t ReaderPool::TotalBytes() const {
  uint64_t n = 0;
  for (int r = 0; r < size(); ++r) n += stats(r).bytes.load();
  return n;
}

std::string ReaderPool::Summary() const {
  struct Totals {
    uint64_t reads = 0, bytes = 0;
    uint64_t errors[kOutcomeCount] = {};  // after the event
  };
  std::map<std::string, Totals> by_kind;
  for (int r = 0; r < size(); ++r) {
    std::string kind = Describe(r);
    kind = kind.substr(kind.find('(') + 1);
    kind.pop_back();
    Totals& t = by_kind[kind];
    t.reads += stats(r).reads.load();
    t.bytes += stats(r).bytes.load();
    for (int k = 0; k < kOutcomeCount; ++k) t.errors[k] += stats(r).errors[1][k].load();
  }
  std::ostringstream text;
  for (const auto& [kind, t] : by_kind) {
    char line[256];
    std::snprintf(line, sizeof(line), "  %-44s %9llu reads %10.1f MiB", kind.c_str(),
                  static_cast<unsigned long long>(t.reads), t.bytes / 1048576.0);
    text << line;
    const char* separator = "; after the event: ";
    for (int k = 0; k < kOutcomeCount; ++k) {
      if (t.errors[k] == 0) continue;
      text << separator << OutcomeName(k) << " x" << t.errors[k];
      separator = ", ";
    }
    text << "\n";
  }
  return text.str();
}

void ReaderPool::Fail(int reader, const std::string& what) {
  ReaderStats& s = shared_->readers[reader];
  if (s.failed.exchange(true)) return;
  std::snprintf(s.failure, sizeof(s.failure), "%s", what.c_str());
}

void ReaderPool::CountError(int reader, bool after_event, int outcome, int err) {
  ReaderStats& s = shared_->readers[reader];
  s.errors[after_event][outcome]++;
  if (outcome == kOtherError) s.other_errno = err;
  s.exact_since_error = 0;
  int64_t none = 0;
  if (after_event) s.first_error_after_event_ns.compare_exchange_strong(none, NowNs());
}

uint32_t ReaderPool::MaskForNewHandle() const {
  return shared_->event.load() ? (1u << versions_.size()) - 1 : 1u;
}

uint64_t ReaderPool::SizeFor(uint32_t mask) const {
  uint64_t size = 0;
  for (size_t v = 0; v < versions_.size(); ++v) {
    if (mask >> v & 1) size = std::max<uint64_t>(size, versions_[v]->bytes.size());
  }
  return size;
}

std::pair<uint64_t, uint64_t> ReaderPool::PickRange(std::mt19937_64& rng, uint64_t size,
                                                    bool inside) const {
  std::uniform_real_distribution<double> log_length(0, std::log(double(options_.max_read) + 1));
  uint64_t length = std::clamp<uint64_t>(static_cast<uint64_t>(std::exp(log_length(rng))), 1,
                                         options_.max_read);
  uint64_t roll = rng() % 100;
  uint64_t offset;
  if (roll < 45 && !boundaries_.empty()) {  // across (or ending at) a boundary
    uint64_t mark = boundaries_[rng() % boundaries_.size()];
    uint64_t back = rng() % (length + 1);
    offset = mark > back ? mark - back : 0;
  } else if (roll < 55) {  // the footer and the end of file
    offset = size - std::min<uint64_t>(size, rng() % 512);
  } else if (roll < 58) {  // past the end
    offset = size + rng() % 4096;
  } else {
    offset = size ? rng() % size : 0;
  }
  if (inside) {
    offset = std::min<uint64_t>(offset, size - 1);
    length = std::min<uint64_t>(length, size - offset);
  }
  return {offset, length};
}

bool ReaderPool::Check(int reader, std::atomic<uint32_t>* mask, uint64_t offset, uint64_t length,
                       const char* data, uint64_t count, int error, const char* how) {
  const uint32_t allowed = mask->load();
  uint32_t matches = 0;
  for (size_t v = 0; v < versions_.size(); ++v) {
    if (!(allowed >> v & 1)) continue;
    const std::string& want = versions_[v]->bytes;
    uint64_t expect = offset >= want.size() ? 0 : std::min<uint64_t>(length, want.size() - offset);
    // With an error, what came before it must still be exact.
    bool ok = error ? count <= expect : count == expect;
    if (ok && count > 0) ok = std::memcmp(data, want.data() + offset, count) == 0;
    if (ok) matches |= 1u << v;
  }
  // Narrow the descriptor's versions; a wrong read leaves them as they were, so that one wrong
  // read is reported once, not again at every later read of a shared descriptor.
  uint32_t before = mask->load();
  while ((before & matches) != 0) {
    if (mask->compare_exchange_weak(before, before & matches)) return true;
  }

  shared_->readers[reader].wrong++;
  std::ostringstream what;
  what << Describe(reader) << ": WRONG BYTES: " << how << " of " << length << " bytes at "
       << offset << " returned " << count << " bytes"
       << (error ? std::string(" then ") + std::strerror(error) : std::string());
  for (size_t v = 0; v < versions_.size(); ++v) {
    if (!(before >> v & 1)) continue;
    const std::string& want = versions_[v]->bytes;
    uint64_t expect = offset >= want.size() ? 0 : std::min<uint64_t>(length, want.size() - offset);
    what << "; version " << v << " (" << want.size() << " bytes) has " << expect;
    for (uint64_t i = 0; i < std::min(count, expect); ++i) {
      if (data[i] != want[offset + i]) {
        what << ", first difference at file offset " << offset + i << ": got 0x" << std::hex
             << (static_cast<unsigned>(data[i]) & 0xFF) << " want 0x"
             << (static_cast<unsigned>(want[offset + i]) & 0xFF) << std::dec;
        break;
      }
    }
  }
  if (before != allowed || matches == 0) what << " (versions allowed: mask " << before << ")";
  Fail(reader, what.str());
  return false;
}

void ReaderPool::ThreadLoop(int reader) {
  const Role& role = RoleOf(reader);
  Slot& slot = *slots_[slot_of_[reader]];
  ReaderStats& s = shared_->readers[reader];
  const bool reopens = Reopens(reader);
  std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(reader));
  std::vector<char> buffer(options_.max_read);
  uint64_t iteration = 0;
  auto drop = [&slot](const std::shared_ptr<Handle>& handle) {
    std::lock_guard lock(slot.mu);
    if (slot.current == handle) slot.current.reset();
  };
  while (!shared_->stop.load()) {
    std::shared_ptr<Handle> handle;
    int open_error = 0;
    {
      std::lock_guard lock(slot.mu);
      if (!slot.current) {
        auto fresh = std::make_shared<Handle>();
        fresh->fd = Fd(path_, slot.flags);
        open_error = fresh->fd.ok() ? 0 : errno;
        // Read after the open returned: "before the event" then means the open completed
        // before the change began.
        fresh->before_event = !shared_->event.load();
        fresh->mask = MaskForNewHandle();
        fresh->direct = (slot.flags & O_DIRECT) != 0;
        if (!open_error) slot.current = fresh;
      }
      handle = slot.current;
    }
    if (!handle) {
      bool after_event = shared_->event.load();
      CountError(reader, after_event, OutcomeOf(open_error), open_error);
      if (!after_event) Fail(reader, Describe(reader) + ": open: " + std::strerror(open_error));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    auto [offset, length] = PickRange(rng, SizeFor(handle->mask.load()), false);
    const bool after_event = shared_->event.load();
    const int64_t change_done_ns = shared_->event_done_ns.load();
    if (!role.direct && (after_event || ++iteration % 16 == 0)) {
      posix_fadvise(handle->fd.get(), 0, 0, POSIX_FADV_DONTNEED);  // make reads reach the daemon
    }
    const int64_t start_ns = NowNs();
    s.in_read_since_ns = start_ns;
    ReadResult r = ReadFull(handle->fd.get(), buffer.data(), length, offset);
    s.in_read_since_ns = 0;
    const bool exact = Check(reader, &handle->mask, offset, length, buffer.data(), r.count, r.error,
                             role.direct ? "O_DIRECT pread" : "pread");
    if (r.error) {
      // A read that began before the event may fail because of it.
      const bool failed_after_event = shared_->event.load();
      CountError(reader, failed_after_event, OutcomeOf(r.error), r.error);
      if (!failed_after_event) {
        Fail(reader, Describe(reader) + ": pread of " + std::to_string(length) + " bytes at " +
                         std::to_string(offset) + ": " + std::strerror(r.error));
      }
      const bool lost = ConnectionLost(r.error);
      if ((lost && options_.recover) || reopens) drop(handle);
      if (lost) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (!exact) continue;
    s.reads++;
    s.bytes += r.count;
    s.exact_since_error++;
    if (after_event) s.exact_after_event++;
    if (!(handle->mask.load() & 1)) s.new_version_reads++;
    if (change_done_ns != 0 && start_ns >= change_done_ns && handle->before_event &&
        handle->direct && r.count > 0) {
      for (const auto& [begin, end] : must_fail_) {
        if (offset < end && offset + r.count > begin) {
          s.served_after_change++;
          Fail(reader, Describe(reader) + ": O_DIRECT pread of " + std::to_string(length) +
                           " bytes at " + std::to_string(offset) +
                           " returned bytes of a shard changed before the read began");
          break;
        }
      }
    }
    if (reopens && rng() % 40 == 0) drop(handle);
  }
}

int ReaderPool::MapperLoop(int reader) {
  struct sigaction action {};
  action.sa_handler = OnSigbus;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_NODEFER;
  sigaction(SIGBUS, &action, nullptr);
  ReaderStats& s = shared_->readers[reader];
  std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(reader));
  std::vector<char> buffer(options_.max_read);
  Fd fd;
  const char* map = nullptr;
  uint64_t size = 0;
  std::atomic<uint32_t> mask{0};
  uint64_t iteration = 0;
  auto unmap = [&] {
    if (map) munmap(const_cast<char*>(map), size);
    map = nullptr;
    fd.Close();
  };
  while (!shared_->stop.load()) {
    if (!map) {
      fd = Fd(path_, O_RDONLY);
      bool after_event = shared_->event.load();
      struct stat st;
      int err = !fd.ok() ? errno : fstat(fd.get(), &st) != 0 ? errno : 0;
      if (err) {
        fd.Close();
        CountError(reader, after_event, OutcomeOf(err), err);
        if (!after_event) Fail(reader, Describe(reader) + ": open: " + std::strerror(err));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      size = static_cast<uint64_t>(st.st_size);
      uint32_t m = MaskForNewHandle(), sized = 0;
      for (size_t v = 0; v < versions_.size(); ++v) {
        if ((m >> v & 1) && versions_[v]->bytes.size() == size) sized |= 1u << v;
      }
      mask = sized;
      void* mapped = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (mapped == MAP_FAILED) {
        Fail(reader, Describe(reader) + ": mmap: " + std::strerror(errno));
        return 1;
      }
      map = static_cast<const char*>(mapped);
    }
    auto [offset, length] = PickRange(rng, size, true);
    const bool after_event = shared_->event.load();
    s.in_read_since_ns = NowNs();
    bool faulted = false;
    if (sigsetjmp(g_bus_jump, 1) == 0) {
      g_bus_armed = 1;
      std::memcpy(buffer.data(), map + offset, length);
      g_bus_armed = 0;
    } else {
      faulted = true;
    }
    s.in_read_since_ns = 0;
    if (faulted) {
      const bool failed_after_event = shared_->event.load();
      CountError(reader, failed_after_event, kSigbus, 0);
      if (!failed_after_event) {
        Fail(reader, Describe(reader) + ": SIGBUS reading " + std::to_string(length) +
                         " bytes of the mapping at " + std::to_string(offset));
      }
      if (options_.recover) {
        unmap();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      continue;
    }
    if (Check(reader, &mask, offset, length, buffer.data(), length, 0, "mmap read")) {
      s.reads++;
      s.bytes += length;
      s.exact_since_error++;
      if (after_event) s.exact_after_event++;
      if (!(mask.load() & 1)) s.new_version_reads++;
    }
    if (after_event || ++iteration % 8 == 0) {
      // Let go of the pages, so that the next accesses fault them in through the daemon.
      madvise(const_cast<char*>(map), size, MADV_DONTNEED);
      posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    }
  }
  unmap();
  return 0;
}

void ReaderPool::Monitor() {
  const int64_t deadline_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.read_deadline).count();
  while (!monitor_stop_.load()) {
    int64_t now = NowNs();
    for (int r = 0; r < size(); ++r) {
      int64_t since = stats(r).in_read_since_ns.load();
      if (since == 0 || now - since < deadline_ns) continue;
      Fail(r, Describe(r) + ": HANG: a read did not return within " +
                  std::to_string(deadline_ns / 1'000'000'000) + " s");
      if (!hang_reported_.exchange(true)) {
        std::fprintf(stderr, "%s: a read is stuck; killing the daemon so it returns\n",
                     Describe(r).c_str());
        if (on_hang_) on_hang_();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace aprfs_itest
