// Load and faults on local models (issue #5): 16 concurrent readers (plus mmap readers) at random
// offsets and sizes compared byte for byte; kill -9 of the daemon mid-read, then a remount; a
// shard renamed over or truncated while read; a lazy unmount and a SIGTERM while a reader holds
// the file. The rule everywhere: exactly the bytes of the model (the version a descriptor
// opened), or an error; never other bytes, never a hang.
//
// APRFS_LOAD_SECONDS sets the length of the load test (default 60; bench/load.sh runs it longer,
// sanitizer runs shorter), APRFS_LOAD_SEED its random seed (printed, so a failure reproduces).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "tests/integration/load_readers.h"
#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

double LoadSeconds() {
  const char* env = std::getenv("APRFS_LOAD_SECONDS");
  return env ? std::atof(env) : 60.0;
}

uint64_t LoadSeed() {
  const char* env = std::getenv("APRFS_LOAD_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20261122;
}

// Shards of tensors in eight dtypes with odd element counts (so no tensor ends on a 64-byte
// boundary, and one holds a single element), each shard's data starting unaligned, plus a
// config.json and tokenizer.json: the header, metadata, index, data and footer regions and the
// shard changes all have boundaries for reads to cross.
tw::TestModel MixedModel(int shards, uint64_t bytes_per_shard, uint32_t seed) {
  static const char* const kDtypes[] = {"F32", "F16", "BF16", "F64", "I32", "I64", "I8", "U8"};
  const tw::TestModel side = tw::LlamaLikeModel(1, 1, true, seed);
  tw::TestModel model;
  model.config_json = side.config_json;
  model.tokenizer_json = side.tokenizer_json;
  model.shard_layout.pad_header_to_8 = false;
  for (int k = 0; k < shards; ++k) {
    const std::string p = "layers." + std::to_string(k) + ".";
    std::vector<tw::TestTensor> tensors;
    // Half of the shard in one big tensor, the other half spread over the eight dtypes.
    uint64_t rows = (bytes_per_shard / 2 / 2 / 7) | 1;
    tensors.push_back(tw::MakeTensor(p + "big", "BF16", {rows, 7}, seed));
    for (int i = 0; i < 8; ++i) {
      const std::string dtype = kDtypes[(i + k) % 8];
      uint64_t elements = bytes_per_shard / 2 / 8 / tw::ElementBytes(dtype);
      tensors.push_back(tw::MakeTensor(p + "t" + std::to_string(i) + "_" + dtype, dtype,
                                       {(elements / 3) | 1, 3}, seed));
    }
    tensors.push_back(tw::MakeTensor(p + "scalar", kDtypes[k % 8], {1}, seed));
    model.shards.push_back(std::move(tensors));
  }
  return model;
}

// The same model with new bytes in shard k (same names, dtypes and shapes).
tw::TestModel Rewritten(const tw::TestModel& model, size_t k, uint32_t seed) {
  tw::TestModel changed = model;
  for (tw::TestTensor& t : changed.shards[k]) t = tw::MakeTensor(t.name, t.dtype, t.shape, seed);
  return changed;
}

// The same model with shard k's tensors of other shapes (so another shard size and index).
tw::TestModel Resized(const tw::TestModel& model, size_t k, uint32_t seed) {
  tw::TestModel changed = model;
  for (tw::TestTensor& t : changed.shards[k]) {
    std::vector<uint64_t> shape = t.shape;
    shape[0] = shape[0] > 8 ? shape[0] - 6 : shape[0] + 2;
    t = tw::MakeTensor(t.name, t.dtype, shape, seed);
  }
  return changed;
}

int CountMounts(const std::string& mountpoint) {
  int n = 0;
  for (const MountEntry& m : ReadMountInfo()) n += m.mountpoint == mountpoint;
  return n;
}

class LoadTest : public MountTest {
 protected:
  // --source models: the model's name and the URI the mount puts in its metadata.
  std::string SourceUri(const std::string& name) const {
    return "file://" + (fs::weakly_canonical(models_dir()) / name).string();
  }

  // Makes every blocked read return: kills this mountpoint's daemons (the connection aborts).
  void KillDaemons() {
    if (daemon_pid() > 0) kill(daemon_pid(), SIGKILL);
    for (pid_t pid : FindDaemonPids(mountpoint())) kill(pid, SIGKILL);
  }

  std::unique_ptr<ReaderPool> MakePool(const std::string& path,
                                       std::vector<const AprVersion*> versions,
                                       ReaderOptions options) {
    options.seed = LoadSeed();
    std::fprintf(stderr, "readers of %s: seed %llu (APRFS_LOAD_SEED=%llu reproduces it)\n",
                 path.c_str(), static_cast<unsigned long long>(options.seed),
                 static_cast<unsigned long long>(options.seed));
    return std::make_unique<ReaderPool>(path, std::move(versions), options,
                                        [this] { KillDaemons(); });
  }

  // Lets the readers run for `duration`, or until one of them failed.
  static void RunFor(const ReaderPool& pool, std::chrono::duration<double> duration) {
    auto end = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(duration);
    while (std::chrono::steady_clock::now() < end) {
      for (int r = 0; r < pool.size(); ++r) {
        if (pool.stats(r).failed.load()) return;
      }
      std::this_thread::sleep_for(50ms);
    }
  }

  // Waits until every reader has read the file once: on a busy machine threads and mapper
  // processes start late, and a reader whose first open came after the event (an unmount, a
  // kill) would count that open's ENOENT as the event's doing.
  static void WaitUntilEveryReaderRead(const ReaderPool& pool) {
    ASSERT_TRUE(pool.WaitForAll([](const ReaderStats& s) { return s.reads.load() > 0; }, 60s))
        << "not every reader read the file within 60 s of its start";
  }

  // Waits until `n` readers are inside a read (so that an event hits reads in flight).
  static void WaitForReadsInFlight(const ReaderPool& pool, int n) {
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (pool.InRead() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  }

  // No reader got wrong bytes, hung, or failed before the event; no mapper crashed.
  static void ExpectNoFailure(const ReaderPool& pool) {
    for (int r = 0; r < pool.size(); ++r) {
      const ReaderStats& s = pool.stats(r);
      if (s.failed.load() || s.wrong.load() != 0) {
        ADD_FAILURE() << s.failure << " (" << s.wrong.load() << " wrong reads in all)";
      }
      EXPECT_EQ(s.Errors(false), 0u)
          << pool.Describe(r) << " failed before the event: " << s.ErrorSummary(false);
    }
    for (const std::string& problem : pool.problems()) ADD_FAILURE() << problem;
  }

  // After the event, only these outcomes happened.
  static void ExpectOnlyErrors(const ReaderPool& pool, const std::set<int>& allowed) {
    for (int r = 0; r < pool.size(); ++r) {
      const ReaderStats& s = pool.stats(r);
      for (int k = 0; k < kOutcomeCount; ++k) {
        if (allowed.count(k)) continue;
        EXPECT_EQ(s.errors[1][k].load(), 0u)
            << pool.Describe(r) << " after the event: " << s.ErrorSummary(true);
      }
    }
  }

  static uint64_t Sum(const ReaderPool& pool,
                      const std::function<uint64_t(const ReaderStats&)>& field) {
    uint64_t total = 0;
    for (int r = 0; r < pool.size(); ++r) total += field(pool.stats(r));
    return total;
  }

  static uint64_t NewVersionReads(const ReaderPool& pool) {
    return Sum(pool, [](const ReaderStats& s) { return s.new_version_reads.load(); });
  }

  // A lookup after the entry timeout rebuilds the model: a fresh open reads `want`, whole.
  void ExpectFreshOpenServes(const std::string& path, ino_t old_inode, const AprVersion& want) {
    auto deadline = std::chrono::steady_clock::now() + 30s;
    struct stat st {};
    while (std::chrono::steady_clock::now() < deadline) {
      if (stat(path.c_str(), &st) == 0 && st.st_ino != old_inode) break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_NE(st.st_ino, old_inode) << "the changed model kept its inode for 30 s";
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(path, &bytes, &error)) << error;
    EXPECT_EQ(bytes.size(), want.bytes.size());
    EXPECT_EQ(FirstDifference(bytes, want.bytes), std::nullopt)
        << "a fresh open does not read the new version";
  }

  // Runs the readers 1 s, applies `change` between MarkEvent and MarkEventDone, runs them 3 s
  // more (past the 1 s entry timeout, so reopening readers meet the rebuilt model) and, on a
  // slow machine, up to 10 s more until `until` holds; then stops them.
  void RunAroundChange(ReaderPool& pool, const std::function<void()>& change,
                       std::vector<std::pair<uint64_t, uint64_t>> must_fail = {},
                       const std::function<bool()>& until = {}) {
    pool.Start();
    RunFor(pool, 1s);
    ASSERT_NO_FATAL_FAILURE(WaitUntilEveryReaderRead(pool));
    WaitForReadsInFlight(pool, 4);
    pool.MarkEvent();
    change();
    pool.MarkEventDone(std::move(must_fail));
    RunFor(pool, 3s);
    for (int i = 0; i < 100 && until && !until(); ++i) RunFor(pool, 100ms);
    pool.Stop();
    std::fprintf(stderr, "%llu exact reads, %.1f MiB\n%s",
                 static_cast<unsigned long long>(pool.TotalReads()),
                 pool.TotalBytes() / 1048576.0, pool.Summary().c_str());
  }
};

// ----- load -----------------------------------------------------------------------------------

TEST_F(LoadTest, SixteenReadersAndMappersAtRandomRangesGetExactBytes) {
  const double seconds = LoadSeconds();
  SetWatchdog(std::chrono::seconds(static_cast<int64_t>(seconds) + 120));
  tw::TestModel model = MixedModel(6, 8 << 20, 501);
  tw::WriteModel(Model("load"), model);
  AprVersion expected;
  ASSERT_NO_FATAL_FAILURE(
      BuildExpectedApr(Model("load"), "load", SourceUri("load"), model, &expected));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("load.apr");
  ASSERT_EQ(FileSize(path), expected.bytes.size());

  std::unique_ptr<ReaderPool> pool = MakePool(path, {&expected}, {});
  auto start = std::chrono::steady_clock::now();
  pool->Start();
  RunFor(*pool, std::chrono::duration<double>(seconds));
  pool->Stop();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  ExpectNoFailure(*pool);
  for (int r = 0; r < pool->size(); ++r) {
    EXPECT_GT(pool->stats(r).reads.load(), 10u) << pool->Describe(r) << " hardly read anything";
  }
  const uint64_t reads = pool->TotalReads(), bytes = pool->TotalBytes();
  std::fprintf(stderr, "load: %d readers, %.1f s, %llu exact reads, %.1f MiB (%.1f MiB/s):\n%s",
               pool->size(), took, static_cast<unsigned long long>(reads), bytes / 1048576.0,
               bytes / 1048576.0 / took, pool->Summary().c_str());
  RecordProperty("reads", std::to_string(reads));
  RecordProperty("bytes", std::to_string(bytes));
  EXPECT_TRUE(DaemonAlive()) << DaemonState();
}

// ----- kill -9 --------------------------------------------------------------------------------

TEST_F(LoadTest, KilledDaemonFailsEveryReaderPromptlyAndARemountServesExactBytesAgain) {
  tw::TestModel model = MixedModel(3, 3 << 20, 502);
  tw::WriteModel(Model("crash"), model);
  AprVersion expected;
  ASSERT_NO_FATAL_FAILURE(
      BuildExpectedApr(Model("crash"), "crash", SourceUri("crash"), model, &expected));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ReaderOptions options;
  options.recover = true;  // after the connection is lost, reopen until the remount
  std::unique_ptr<ReaderPool> pool = MakePool(MP("crash.apr"), {&expected}, options);
  pool->Start();
  RunFor(*pool, 1s);
  ASSERT_NO_FATAL_FAILURE(WaitUntilEveryReaderRead(*pool));
  WaitForReadsInFlight(*pool, 6);
  const int in_flight = pool->InRead();

  pool->MarkEvent();
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(daemon_pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitDaemonExit(10s).has_value()) << "the killed daemon did not go away";
  // Every reader must learn of it promptly: an error, never a hang (reads of pages still in
  // the page cache may succeed meanwhile; the readers drop their cache after the event).
  bool all_failed = pool->WaitForAll(
      [](const ReaderStats& s) { return s.first_error_after_event_ns.load() != 0; }, 30s);
  int64_t slowest_ns = 0;
  const int64_t killed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                killed_at.time_since_epoch())
                                .count();
  for (int r = 0; r < pool->size(); ++r) {
    int64_t at = pool->stats(r).first_error_after_event_ns.load();
    EXPECT_NE(at, 0) << pool->Describe(r) << " saw no error within 30 s of the kill";
    if (at) slowest_ns = std::max(slowest_ns, at - killed_ns);
  }
  std::fprintf(stderr, "kill -9 with %d reads in flight: every reader failed within %.3f s\n",
               in_flight, slowest_ns / 1e9);
  EXPECT_TRUE(all_failed);
  // An error, not a hang: milliseconds when idle; the bound is wide for a busy machine.
  EXPECT_LT(slowest_ns, 30'000'000'000) << "a reader took more than 30 s to see the daemon die";

  // The dead mount (held by the readers' descriptors) is replaced, not stacked upon.
  AdoptMount(mountpoint());
  ProcResult remount = RunAprfs({"mount", mountpoint(), "--no-hf-cache", "--source", models_dir(),
                                 "--log-file", root() + "/remount.log"},
                                60s);
  ASSERT_EQ(remount.exit_code, 0) << remount.Describe();
  EXPECT_NE(remount.err.find("replaced a dead aprfs mount"), std::string::npos)
      << remount.Describe();
  EXPECT_EQ(CountMounts(mountpoint()), 1);
  // Every reader is back to exact reads.
  bool all_back = pool->WaitForAll(
      [](const ReaderStats& s) { return s.exact_since_error.load() >= 3; }, 20s);
  pool->Stop();
  EXPECT_TRUE(all_back) << "not every reader read exact bytes again within 20 s of the remount";
  for (int r = 0; r < pool->size(); ++r) {
    EXPECT_GE(pool->stats(r).exact_since_error.load(), 3u)
        << pool->Describe(r) << ": " << pool->stats(r).ErrorSummary(true);
  }
  ExpectNoFailure(*pool);
  // ENOENT: a reopen between the detach of the dead mount and the new mount sees the bare folder.
  ExpectOnlyErrors(*pool, {kNotConnected, kAborted, kSigbus, kNoEntry});
  std::fprintf(stderr, "%s", pool->Summary().c_str());
}

// ----- a shard replaced while read -------------------------------------------------------------

class ReplacedShardTest : public LoadTest {
 protected:
  static constexpr size_t kShard = 1;  // the middle one of three

  void SetUp() override {
    LoadTest::SetUp();
    model_ = MixedModel(3, 3 << 20, 503);
    shards_ = tw::WriteModel(Model("mut"), model_);
    ASSERT_NO_FATAL_FAILURE(BuildExpectedApr(Model("mut"), "mut", SourceUri("mut"), model_, &v0_));
  }

  // `changed` written beside the model; its expected .apr in *v1; the new shard's path.
  std::string Stage(const tw::TestModel& changed, AprVersion* v1) {
    const std::string stage = work_dir() + "/stage";
    tw::WriteModel(stage, changed);
    EXPECT_NO_FATAL_FAILURE(BuildExpectedApr(stage, "mut", SourceUri("mut"), changed, v1));
    return stage + "/" + shards_[kShard];
  }

  std::string ShardPath() const { return Model("mut") + "/" + shards_[kShard]; }

  // rename() of a new shard over the old one while 16 readers and 2 mappers read. Descriptors
  // opened before keep reading the model as it was mounted (the daemon holds the old shard
  // open), without an error; descriptors opened after show one version each, never a mix; a
  // fresh open after the entry timeout shows the new version.
  void ExpectRenameOverIsSafe(const tw::TestModel& changed) {
    AprVersion v1;
    const std::string staged = Stage(changed, &v1);
    ASSERT_FALSE(HasFailure());
    ASSERT_NE(v1.bytes, v0_.bytes);
    ASSERT_NO_FATAL_FAILURE(MountModels());
    const std::string path = MP("mut.apr");
    struct stat before;
    ASSERT_EQ(stat(path.c_str(), &before), 0);
    std::unique_ptr<ReaderPool> pool = MakePool(path, {&v0_, &v1}, {});
    RunAroundChange(
        *pool,
        [&] { ASSERT_EQ(rename(staged.c_str(), ShardPath().c_str()), 0) << std::strerror(errno); },
        {}, [&] { return NewVersionReads(*pool) > 0; });
    ExpectNoFailure(*pool);
    ExpectOnlyErrors(*pool, {});
    for (int r = 0; r < pool->size(); ++r) {
      EXPECT_GT(pool->stats(r).exact_after_event.load(), 0u)
          << pool->Describe(r) << " read nothing after the rename";
    }
    EXPECT_GT(NewVersionReads(*pool), 0u)
        << "no reader that reopened the file met the new version within 13 s";
    ExpectFreshOpenServes(path, before.st_ino, v1);
    EXPECT_TRUE(DaemonAlive()) << DaemonState();
  }

  tw::TestModel model_;
  std::vector<std::string> shards_;
  AprVersion v0_;
};

TEST_F(ReplacedShardTest, RenamedOverWithSameSizeKeepsOldHandlesExactAndNewOnesOnOneVersion) {
  ExpectRenameOverIsSafe(Rewritten(model_, kShard, 777));
}

TEST_F(ReplacedShardTest, RenamedOverWithAnotherSizeKeepsOldHandlesExactAndNewOnesOnOneVersion) {
  ExpectRenameOverIsSafe(Resized(model_, kShard, 778));
}

// In the HF cache a file is replaced by pointing its snapshot symlink at another blob.
TEST_F(ReplacedShardTest, HfCacheSymlinkRetargetedKeepsOldHandlesExactAndNewOnesOnOneVersion) {
  const std::string cache = root() + "/hub";
  const std::string snapshot =
      tw::WriteHfCacheRepo(cache, "acme/evolving", std::string(40, 'a'), Model("mut"));
  AprVersion v0, v1;
  ASSERT_NO_FATAL_FAILURE(BuildExpectedApr(snapshot, "evolving", "hf://acme/evolving", model_, &v0));
  tw::TestModel changed = Rewritten(model_, kShard, 779);
  const std::string stage = work_dir() + "/stage";
  tw::WriteModel(stage, changed);
  ASSERT_NO_FATAL_FAILURE(BuildExpectedApr(stage, "evolving", "hf://acme/evolving", changed, &v1));
  const std::string blob = cache + "/models--acme--evolving/blobs/new-shard-blob";
  fs::copy_file(stage + "/" + shards_[kShard], blob);
  const std::string link = snapshot + "/" + shards_[kShard];
  fs::create_symlink(fs::relative(blob, snapshot), link + ".new");

  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache}));
  const std::string path = MP("evolving.apr");
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  std::unique_ptr<ReaderPool> pool = MakePool(path, {&v0, &v1}, {});
  RunAroundChange(
      *pool,
      [&] { ASSERT_EQ(rename((link + ".new").c_str(), link.c_str()), 0) << std::strerror(errno); },
      {}, [&] { return NewVersionReads(*pool) > 0; });
  ExpectNoFailure(*pool);
  ExpectOnlyErrors(*pool, {});
  EXPECT_GT(NewVersionReads(*pool), 0u)
      << "no reader that reopened the file met the new version within 13 s";
  ExpectFreshOpenServes(path, before.st_ino, v1);
}

// Truncated in place while read: reads of that shard fail with EIO (O_DIRECT ones that start
// after the truncation, always), the other shards stay readable through the old descriptors,
// and no read ever returns other bytes.
TEST_F(ReplacedShardTest, TruncatedUnderConcurrentReadersGivesEioNeverOtherBytes) {
  ASSERT_NO_FATAL_FAILURE(MountModels());
  std::unique_ptr<ReaderPool> pool = MakePool(MP("mut.apr"), {&v0_}, {});
  RunAroundChange(
      *pool,
      [&] {
        ASSERT_EQ(truncate(ShardPath().c_str(), static_cast<off_t>(FileSize(ShardPath()) / 2)), 0)
            << std::strerror(errno);
      },
      v0_.shard_ranges[kShard]);
  ExpectNoFailure(*pool);
  // ENOENT: reopening readers find the broken model hidden once it is looked up again.
  ExpectOnlyErrors(*pool, {kEio, kSigbus, kNoEntry});
  EXPECT_GT(Sum(*pool, [](const ReaderStats& s) { return s.errors[1][kEio].load(); }), 0u)
      << "no read noticed the truncation";
  for (int r = 0; r < pool->size(); ++r) {
    if (pool->IsDirect(r) && !pool->Reopens(r)) {
      EXPECT_GT(pool->stats(r).exact_after_event.load(), 0u)
          << pool->Describe(r) << ": the other shards did not stay readable";
    }
  }
  EXPECT_TRUE(DaemonAlive()) << DaemonState();
}

// ----- unmount and SIGTERM while the file is open ----------------------------------------------

// `umount -l` while readers are mid-stream: the mount leaves the namespace at once, the readers
// keep getting exact bytes through the descriptors (and mappings) they hold, and when the last
// one closes, the daemon exits by itself with status 0.
TEST_F(LoadTest, LazyUnmountLetsOpenReadersFinishThenTheDaemonExitsCleanly) {
  tw::TestModel model = MixedModel(3, 2 << 20, 504);
  tw::WriteModel(Model("lazy"), model);
  AprVersion expected;
  ASSERT_NO_FATAL_FAILURE(
      BuildExpectedApr(Model("lazy"), "lazy", SourceUri("lazy"), model, &expected));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("lazy.apr");
  ReaderOptions options;
  options.threads = 4;  // own and shared descriptors, buffered and O_DIRECT
  options.mappers = 1;
  options.reopen_often = false;  // the path goes away with the mount
  std::unique_ptr<ReaderPool> pool = MakePool(path, {&expected}, options);
  // And one reader streaming the file front to back with read(2).
  Fd stream(path, O_RDONLY);
  ASSERT_TRUE(stream.ok()) << std::strerror(errno);
  std::string streamed(expected.bytes.size(), '\0');
  const uint64_t half = streamed.size() / 2;
  ASSERT_EQ(PreadFull(stream.get(), streamed.data(), half, 0), static_cast<int64_t>(half));

  pool->Start();
  RunFor(*pool, 500ms);
  ASSERT_NO_FATAL_FAILURE(WaitUntilEveryReaderRead(*pool));
  pool->MarkEvent();
  ProcResult lazy = RunCommand({"umount", "-l", mountpoint()}, 30s);
  ASSERT_EQ(lazy.exit_code, 0) << lazy.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value()) << "still in the mount table after umount -l";
  RunFor(*pool, 1500ms);
  // And on a busy machine until each reader read after the unmount (checked below).
  pool->WaitForAll([](const ReaderStats& s) { return s.exact_after_event.load() > 0; }, 30s);
  EXPECT_TRUE(DaemonAlive()) << "the daemon quit while readers still held the file: "
                             << DaemonState();
  ASSERT_EQ(lseek(stream.get(), static_cast<off_t>(half), SEEK_SET), static_cast<off_t>(half));
  for (uint64_t at = half; at < streamed.size();) {
    ssize_t n = read(stream.get(), streamed.data() + at, std::min<uint64_t>(65537, streamed.size() - at));
    ASSERT_GT(n, 0) << "read at " << at << " after umount -l: " << std::strerror(errno);
    at += static_cast<uint64_t>(n);
  }
  EXPECT_EQ(FirstDifference(streamed, expected.bytes), std::nullopt);
  pool->Stop();
  stream.Close();
  std::fprintf(stderr, "%s", pool->Summary().c_str());
  ExpectNoFailure(*pool);
  ExpectOnlyErrors(*pool, {});
  for (int r = 0; r < pool->size(); ++r) {
    EXPECT_GT(pool->stats(r).exact_after_event.load(), 0u)
        << pool->Describe(r) << " read nothing after the lazy unmount";
  }

  std::optional<int> status = WaitDaemonExit(10s);
  ASSERT_TRUE(status.has_value()) << "the daemon did not exit after the last reader closed";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "daemon wait status " << *status;
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
}

// SIGTERM while readers hold the file: the daemon unmounts and exits 0 without waiting for
// them; each read returns exact bytes or an error, none hangs.
TEST_F(LoadTest, SigtermWhileReadersHoldTheFileEndsTheDaemonWithoutHangOrWrongBytes) {
  tw::TestModel model = MixedModel(3, 2 << 20, 505);
  tw::WriteModel(Model("term"), model);
  AprVersion expected;
  ASSERT_NO_FATAL_FAILURE(
      BuildExpectedApr(Model("term"), "term", SourceUri("term"), model, &expected));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ReaderOptions options;
  options.threads = 6;
  options.mappers = 1;
  options.reopen_often = false;
  std::unique_ptr<ReaderPool> pool = MakePool(MP("term.apr"), {&expected}, options);
  pool->Start();
  RunFor(*pool, 500ms);
  ASSERT_NO_FATAL_FAILURE(WaitUntilEveryReaderRead(*pool));
  WaitForReadsInFlight(*pool, 2);
  pool->MarkEvent();
  ASSERT_EQ(kill(daemon_pid(), SIGTERM), 0);
  std::optional<int> status = WaitDaemonExit(10s);
  ASSERT_TRUE(status.has_value()) << "the daemon did not exit within 10 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "daemon wait status " << *status;
  EXPECT_FALSE(FindMount(mountpoint()).has_value()) << "SIGTERM left the mount behind";
  RunFor(*pool, 500ms);
  pool->Stop();
  std::fprintf(stderr, "%s", pool->Summary().c_str());
  ExpectNoFailure(*pool);
  ExpectOnlyErrors(*pool, {kNotConnected, kAborted, kSigbus});
  for (int r = 0; r < pool->size(); ++r) {
    if (pool->IsDirect(r)) {
      EXPECT_GT(pool->stats(r).Errors(true), 0u)
          << pool->Describe(r) << " read from a daemon that had exited";
    }
  }
}

}  // namespace
}  // namespace aprfs_itest
