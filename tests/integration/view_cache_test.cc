// Concurrent readers of one view, and the computed-chunk cache: shared by mounts, durable
// across a kill -9 in the middle of computing, and really off with --no-view-cache.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <tuple>

#include "tests/integration/view_fixture.h"
#include "tests/support/filesystem_fill.h"

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

using aprfs::testing::FillFilesystem;
using aprfs::testing::FreeBytes;

constexpr uint64_t kChunk = 4u << 20;  // the computed cache's chunk size

// write_bytes of /proc/PID/io: what the process made the kernel write to storage.
uint64_t WriteBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "write_bytes:") return value;
  }
  return 0;
}

// 8 threads read random ranges (odd threads O_DIRECT, so they reach the daemon every time;
// one in four asks for up to two chunks at once) while 2 processes page through a shared mapping
// in random order, dropping the page cache between rounds; every byte is compared with `want`.
// All start together on a cold file, so they race to compute the same chunks.
void HammerView(const std::string& path, const std::string& want) {
  const uint64_t size = want.size();
  std::atomic<bool> go{false};
  std::vector<Child> mappers;
  for (int m = 0; m < 2; ++m) {
    mappers.push_back(StartChild([&, m] { return CompareMappedPages(path, want, 100 + m, 3); }));
  }
  std::mutex mu;
  std::vector<std::string> problems;
  std::atomic<uint64_t> checked{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t) {
    readers.emplace_back([&, t] {
      while (!go) std::this_thread::yield();
      Fd fd(path, O_RDONLY | (t % 2 ? O_DIRECT : 0));
      auto problem = [&](const std::string& what) {
        std::lock_guard lock(mu);
        problems.push_back("reader " + std::to_string(t) + ": " + what);
      };
      if (!fd.ok()) return problem(std::string("open: ") + std::strerror(errno));
      std::mt19937_64 rng(t);
      const uint64_t longest = t % 4 == 0 ? 2 * kChunk + 1 : 300000;
      std::string buffer;
      for (int i = 0; i < 150; ++i) {
        const uint64_t offset = rng() % size;
        const uint64_t length = std::min<uint64_t>(1 + rng() % longest, size - offset);
        buffer.assign(length, '\0');
        int64_t n = PreadFull(fd.get(), buffer.data(), length, offset);
        const std::string where = std::to_string(length) + " bytes at " + std::to_string(offset);
        if (n != static_cast<int64_t>(length)) {
          return problem("pread of " + where + " returned " + std::to_string(n));
        }
        if (std::memcmp(buffer.data(), want.data() + offset, length) != 0) {
          return problem("pread of " + where + " differs from the reference");
        }
        checked += length;
      }
    });
  }
  go = true;
  for (std::thread& reader : readers) reader.join();
  for (Child& mapper : mappers) {
    ProcResult r = WaitChild(mapper, 120s);
    EXPECT_EQ(r.exit_code, 0) << "mmap reader: " << r.Describe();
  }
  EXPECT_EQ(problems, std::vector<std::string>{});
  EXPECT_GT(checked.load(), 0u);
}

// ----- concurrent readers ---------------------------------------------------------------------

struct HammerCase {
  std::string name;
  std::vector<std::string> make_model_args;  // empty: the large FP8 model (four chunks)
  std::string view;
  bool cache = true;
};

void PrintTo(const HammerCase& c, std::ostream* os) { *os << c.name; }

class ViewConcurrencyTest : public ViewTest, public ::testing::WithParamInterface<HammerCase> {};

TEST_P(ViewConcurrencyTest, ConcurrentReadersAndMappersAllSeeTheReferenceBytes) {
  SetWatchdog(240s);
  const HammerCase& c = GetParam();
  std::string want, model = "m";
  if (c.make_model_args.empty()) {
    want = LargeFp8Reference();
    model = "big";
  } else {
    ASSERT_NO_FATAL_FAILURE(MakeModel(model, c.make_model_args));
    want = ExpectedBytes(model, c.view);
  }
  ASSERT_FALSE(want.empty());
  std::vector<std::string> args;
  if (!c.cache) args.push_back("--no-view-cache");
  ASSERT_NO_FATAL_FAILURE(MountViews(args));
  HammerView(MP(ViewFileName(model, c.view)), want);
  EXPECT_TRUE(DaemonAlive()) << DaemonState();

  nlohmann::json status = ViewStatus(model, c.view);
  EXPECT_EQ(status.value("errors", uint64_t{1}), 0u) << status.dump(2);
  EXPECT_GT(status.value("bytes_computed", uint64_t{0}), 0u) << status.dump(2);
  if (c.cache) {
    EXPECT_GE(status.value("cache_misses", uint64_t{0}), 1u) << status.dump(2);
    EXPECT_EQ(status.value("cached_bytes", uint64_t{0}), status.value("cache_stored_bytes", uint64_t{1}));
  } else {
    EXPECT_EQ(status.value("cache_hits", uint64_t{1}), 0u) << status.dump(2);
    EXPECT_EQ(status.value("cache_misses", uint64_t{1}), 0u) << status.dump(2);
    EXPECT_TRUE(status["cached_bytes"].is_null()) << status.dump(2);
  }
}

const std::vector<std::string> kQuantTiny = {"--preset", "quant-tiny"};
// Every reader's first open races the value scan, and the scan finds the head all zeros: each
// open fails with ESTALE and is retried by the kernel on the tied file.
const std::vector<std::string> kZeroHeadSingleFile = {"--preset", "quant-tiny", "--layout",
                                                      "single", "--zero-lm-head"};

INSTANTIATE_TEST_SUITE_P(
    ViewReaders, ViewConcurrencyTest,
    ::testing::Values(HammerCase{"q4k_cached", kQuantTiny, "q4k", true},
                      HammerCase{"q4k_uncached", kQuantTiny, "q4k", false},
                      HammerCase{"int8_cached", kQuantTiny, "int8", true},
                      HammerCase{"int8_uncached", kQuantTiny, "int8", false},
                      HammerCase{"single_file_zero_head_q4k_cached", kZeroHeadSingleFile, "q4k", true},
                      HammerCase{"single_file_zero_head_int4_uncached", kZeroHeadSingleFile, "int4",
                                 false},
                      HammerCase{"fp8_apr_four_chunks_cached", {}, "apr", true},
                      HammerCase{"fp8_apr_four_chunks_uncached", {}, "apr", false}),
    [](const auto& info) { return info.param.name; });

// ----- the computed cache ---------------------------------------------------------------------

class ViewCacheTest : public ViewTest {
 protected:
  // The whole file through O_DIRECT, compared with `want`.
  void ExpectDirectBytes(const std::string& relative, const std::string& want) {
    std::string got, error;
    ASSERT_TRUE(ReadDirect(MP(relative), &got, &error)) << error;
    EXPECT_EQ(FirstDifference(got, want), std::nullopt) << relative;
  }
};

TEST_F(ViewCacheTest, SecondMountServesStoredChunksFromTheCacheAndComputesOnlyTheRest) {
  SetWatchdog(240s);
  const std::string big = LargeFp8Reference();
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const std::string q4k = ExpectedBytes("qt", "q4k");
  const uint64_t chunks = (big.size() - 4 + kChunk - 1) / kChunk;

  // First mount: the first chunk of big.apr and the whole of qt.q4k.apr.
  ASSERT_NO_FATAL_FAILURE(MountViews());
  {
    Fd fd(MP("big.apr"), O_RDONLY | O_DIRECT);
    ASSERT_TRUE(fd.ok()) << std::strerror(errno);
    std::string first(kChunk, '\0');
    ASSERT_EQ(PreadFull(fd.get(), first.data(), kChunk, 0), static_cast<int64_t>(kChunk));
    EXPECT_EQ(first, big.substr(0, kChunk));
  }
  ExpectDirectBytes("qt.q4k.apr", q4k);
  EXPECT_EQ(ViewFigure("big", "apr", "cache_misses"), 1u);
  EXPECT_EQ(ViewFigure("big", "apr", "cache_stored_bytes"), kChunk);
  EXPECT_EQ(ViewFigure("big", "apr", "cached_bytes"), kChunk);
  const uint64_t first_chunk_computed = ViewFigure("big", "apr", "bytes_computed");
  EXPECT_GT(first_chunk_computed, 0u);
  EXPECT_EQ(ViewFigure("qt", "q4k", "cache_misses"), 1u);
  EXPECT_GT(ViewFigure("qt", "q4k", "bytes_computed"), 0u);
  EXPECT_EQ(ViewFigure("qt", "q4k", "cached_bytes"), ViewFigure("qt", "q4k", "cache_stored_bytes"));
  UnmountCleanly();

  // Second mount: what is stored is served, only the other chunks are computed.
  ASSERT_NO_FATAL_FAILURE(MountViews());
  ExpectDirectBytes("qt.q4k.apr", q4k);
  nlohmann::json view = ViewStatus("qt", "q4k");
  EXPECT_GE(view.value("cache_hits", uint64_t{0}), 1u) << view.dump(2);
  EXPECT_EQ(view.value("cache_misses", uint64_t{1}), 0u) << view.dump(2);
  EXPECT_EQ(view.value("bytes_computed", uint64_t{1}), 0u) << view.dump(2);
  EXPECT_EQ(view.value("source_bytes_encoded", uint64_t{1}), 0u) << view.dump(2);

  ExpectDirectBytes("big.apr", big);
  view = ViewStatus("big", "apr");
  EXPECT_GE(view.value("cache_hits", uint64_t{0}), 1u) << "the first chunk: " << view.dump(2);
  EXPECT_EQ(view.value("cache_misses", uint64_t{0}), chunks - 1) << view.dump(2);
  EXPECT_GT(view.value("bytes_computed", uint64_t{0}), 0u) << view.dump(2);
  EXPECT_EQ(view.value("cached_bytes", uint64_t{0}), big.size() - 4) << "every chunk up to the footer";
  UnmountCleanly();

  // Third mount: nothing left to compute.
  ASSERT_NO_FATAL_FAILURE(MountViews());
  ExpectDirectBytes("big.apr", big);
  view = ViewStatus("big", "apr");
  EXPECT_GE(view.value("cache_hits", uint64_t{0}), chunks) << view.dump(2);
  EXPECT_EQ(view.value("cache_misses", uint64_t{1}), 0u) << view.dump(2);
  EXPECT_EQ(view.value("bytes_computed", uint64_t{1}), 0u) << view.dump(2);
}

TEST_F(ViewCacheTest, TwoMountsOfOneCacheShareComputedChunks) {
  SetWatchdog(240s);
  const std::string big = LargeFp8Reference();
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const std::string int8 = ExpectedBytes("qt", "int8");
  ASSERT_NO_FATAL_FAILURE(MountViews());
  const std::string second = root() + "/mnt2";
  fs::create_directories(second);
  AdoptMount(second);
  ProcResult mounted =
      RunAprfs({"mount", second, "--no-hf-cache", "--source", models_dir(), "--cache-dir",
                CacheDir(), "--log-file", root() + "/second.log"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.Describe();

  // Both read the same files at once: each byte exact, whoever computed it.
  std::thread other([&] {
    std::string got, error;
    EXPECT_TRUE(ReadDirect(second + "/big.apr", &got, &error, 999983)) << error;
    EXPECT_EQ(FirstDifference(got, big), std::nullopt) << "the second mount's big.apr";
    EXPECT_TRUE(ReadDirect(second + "/qt.int8.apr", &got, &error, 4099)) << error;
    EXPECT_EQ(FirstDifference(got, int8), std::nullopt) << "the second mount's qt.int8.apr";
  });
  ExpectDirectBytes("big.apr", big);
  other.join();
  Status(second);  // the second mount's background writer stored what it computed
  // Then the int8 view, computed by the other mount only: served from the cache here.
  ExpectDirectBytes("qt.int8.apr", int8);
  nlohmann::json view = ViewStatus("qt", "int8");
  EXPECT_GE(view.value("cache_hits", uint64_t{0}), 1u) << view.dump(2);
  EXPECT_EQ(view.value("cache_misses", uint64_t{1}), 0u) << view.dump(2);
  EXPECT_EQ(view.value("bytes_computed", uint64_t{1}), 0u) << view.dump(2);
  EXPECT_EQ(RunAprfs({"umount", second}).exit_code, 0);
}

TEST_F(ViewCacheTest, CacheSizeLimitEvictsTheLeastRecentlyUsedComputedChunks) {
  SetWatchdog(240s);
  const std::string big = LargeFp8Reference();
  ASSERT_NO_FATAL_FAILURE(MountViews({"--cache-size", "12M"}));  // three of its four chunks
  Fd fd(MP("big.apr"), O_RDONLY | O_DIRECT);
  ASSERT_TRUE(fd.ok()) << std::strerror(errno);
  // Reads chunk `c` whole (the last one up to the footer); returns how many chunk computations
  // the view has needed so far.
  auto read_chunk = [&](uint64_t c) {
    const uint64_t length = std::min<uint64_t>(kChunk, big.size() - 4 - c * kChunk);
    std::string got(length, '\0');
    EXPECT_EQ(PreadFull(fd.get(), got.data(), length, c * kChunk), static_cast<int64_t>(length));
    EXPECT_EQ(got, big.substr(c * kChunk, length)) << "chunk " << c;
    return ViewFigure("big", "apr", "cache_misses");
  };
  // Access times have a resolution of a second: the pauses order them.
  auto pause = [] { std::this_thread::sleep_for(1100ms); };
  EXPECT_EQ(read_chunk(0), 1u);
  pause();
  EXPECT_EQ(read_chunk(1), 2u);
  pause();
  EXPECT_EQ(read_chunk(2), 3u);
  pause();
  EXPECT_EQ(read_chunk(0), 3u) << "stored: served from the cache";
  pause();
  // Over the limit now: the least recently used chunk (1) goes, the most recent one (0) stays.
  EXPECT_EQ(read_chunk(3), 4u);
  EXPECT_EQ(read_chunk(0), 4u) << "chunk 0, the most recently used, was evicted";
  EXPECT_EQ(read_chunk(1), 5u) << "chunk 1, the least recently used, was kept";
  EXPECT_LE(ViewFigure("big", "apr", "cached_bytes"), 12u << 20);
  EXPECT_LE(DiskUsage(CacheDir() + "/chunks"), (12u << 20) + (256u << 10));
  ExpectDirectBytes("big.apr", big);
  EXPECT_LE(ViewFigure("big", "apr", "cached_bytes"), 12u << 20);
  EXPECT_LE(DiskUsage(CacheDir() + "/chunks"), (12u << 20) + (256u << 10));
}

// With no --cache-size, the computed cache still keeps 5 % of its disk free: on a 12 MiB disk
// the 16 MiB .apr of the FP8 model is served exactly while the cache evicts its own chunks; and
// once other files leave less than 5 % free, nothing more is stored, and every byte is served.
TEST_F(ViewCacheTest, CacheKeepsAShareOfItsDiskFreeWhateverTheLimitAndStillServesEveryByte) {
  SetWatchdog(240s);
  const std::string big = LargeFp8Reference();
  constexpr uint64_t kDisk = 12u << 20;
  const uint64_t floor = kDisk / 20;
  fs::create_directories(CacheDir());
  ProcResult tmpfs = RunCommand(
      {"mount", "-t", "tmpfs", "-o", "size=" + std::to_string(kDisk), "aprfs-test", CacheDir()});
  ASSERT_EQ(tmpfs.exit_code, 0) << tmpfs.Describe();

  ASSERT_NO_FATAL_FAILURE(MountViews());
  ExpectDirectBytes("big.apr", big);
  nlohmann::json view = ViewStatus("big", "apr");  // once the writer is done
  EXPECT_GT(view.value("cache_stored_bytes", uint64_t{0}), 0u) << view.dump(2);
  EXPECT_GE(FreeBytes(CacheDir()), floor) << "the cache took the disk below 5 % free";
  ExpectDirectBytes("big.apr", big);  // some chunks from the cache, the others computed again
  Status();
  EXPECT_GE(FreeBytes(CacheDir()), floor) << "the cache took the disk below 5 % free";

  // Another file leaves less than 5 % free (the cache emptied first): nothing is stored, and
  // the file is still served exactly.
  UnmountCleanly();
  fs::remove_all(CacheDir() + "/chunks");
  ASSERT_LT(FillFilesystem(CacheDir(), floor / 2, "other-file"), floor);
  ASSERT_NO_FATAL_FAILURE(MountViews());
  ExpectDirectBytes("big.apr", big);
  EXPECT_EQ(ViewFigure("big", "apr", "cache_stored_bytes"), 0u)
      << "chunks were stored on a disk with less than 5 % free";
  EXPECT_LE(DiskUsage(CacheDir() + "/chunks"), 256u << 10);
  UnmountCleanly();
  EXPECT_EQ(umount2(CacheDir().c_str(), 0), 0) << std::strerror(errno);
}

TEST_F(ViewCacheTest, RewrittenSourceIsNeverServedFromTheOldComputedChunks) {
  SetWatchdog(180s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const std::string before = ExpectedBytes("qt", "q4k");
  ASSERT_NO_FATAL_FAILURE(MountViews());
  ExpectDirectBytes("qt.q4k.apr", before);
  UnmountCleanly();
  // The same files rewritten with other values (same names, same sizes).
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny", "--seed", "2"}));
  const std::string after = ExpectedBytes("qt", "q4k");
  ASSERT_EQ(after.size(), before.size());
  ASSERT_NE(after, before);
  ASSERT_NO_FATAL_FAILURE(MountViews());
  ExpectDirectBytes("qt.q4k.apr", after);
  EXPECT_EQ(ViewFigure("qt", "q4k", "cache_misses"), 1u) << "computed anew";
}

TEST_F(ViewCacheTest, KillNineWhileComputingNeverLeavesAHalfWrittenChunkServed) {
  SetWatchdog(300s);
  const std::string big = LargeFp8Reference();
  const std::string path = MP("big.apr");
  // How long a cold read takes here (computing and storing four chunks), to aim the kills at
  // moments spread over it; only the aim depends on it, never the verdict.
  ASSERT_NO_FATAL_FAILURE(MountViews());
  const auto started = std::chrono::steady_clock::now();
  ExpectDirectBytes("big.apr", big);
  const auto cold_read = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - started);
  UnmountCleanly();
  std::string stored_after;
  int partial = 0;
  for (int eighth = 0; eighth < 8; ++eighth) {
    const Millis delay = cold_read * eighth / 8;
    SCOPED_TRACE("kill -9 " + std::to_string(delay.count()) + " ms into the first read");
    std::error_code ec;
    fs::remove_all(CacheDir(), ec);
    ASSERT_NO_FATAL_FAILURE(MountViews());
    Child reader = StartChild([&]() -> int {
      std::string got, error;
      ReadDirect(path, &got, &error);  // cut short by the kill
      return 0;
    });
    std::this_thread::sleep_for(delay);
    ASSERT_EQ(kill(daemon_pid(), SIGKILL), 0);
    ASSERT_TRUE(WaitDaemonExit(10s).has_value()) << "the killed daemon did not go away";
    ProcResult r = WaitChild(reader, 60s);
    EXPECT_FALSE(r.timed_out) << "a reader hung after the kill: " << r.Describe();
    std::string problem;
    Unmount(&problem);  // a dead connection: whatever it takes

    ASSERT_NO_FATAL_FAILURE(MountViews());
    ASSERT_EQ(FileSize(path), big.size());
    const uint64_t stored = ViewFigure("big", "apr", "cached_bytes");
    if (stored > 0 && stored < big.size() - 4) ++partial;
    stored_after += " " + std::to_string(stored);
    ExpectDirectBytes("big.apr", big);
    DropPageCache(path);
    std::string got, error;
    ASSERT_TRUE(ReadWholeFile(path, &got, &error)) << error;
    EXPECT_EQ(FirstDifference(got, big), std::nullopt) << "read() after the remount";
    UnmountCleanly();
  }
  std::fprintf(stderr,
               "note: a cold read took %lld ms; %d of 8 kills left the store partly filled "
               "(bytes stored:%s)\n",
               static_cast<long long>(cold_read.count()), partial, stored_after.c_str());
}

TEST_F(ViewCacheTest, NoViewCacheKeepsNothingOnDiskAndRecomputesEveryByte) {
  SetWatchdog(240s);
  const std::string big = LargeFp8Reference();
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  ASSERT_NO_FATAL_FAILURE(MakeModel("qs", {"--preset", "quant-tiny", "--layout", "single"}));
  const auto wanted = EveryQuantizedView({"qt", "qs"});
  PrepareReferences(wanted);
  const std::string config = work_dir() + "/config.json";
  tw::WriteFile(config, R"({"view_cache": false})");

  for (const std::vector<std::string>& off :
       {std::vector<std::string>{"--no-view-cache"}, {"-o", "no_view_cache"}, {"--config", config}}) {
    SCOPED_TRACE(::testing::PrintToString(off));
    std::error_code ec;
    fs::remove_all(CacheDir(), ec);
    ASSERT_NO_FATAL_FAILURE(MountViews(off));
    const uint64_t written_before = WriteBytes(daemon_pid());
    uint64_t served = 0;
    std::map<std::string, uint64_t> computed_once;
    for (int pass = 0; pass < 2; ++pass) {
      ExpectDirectBytes("big.apr", big);
      served += big.size();
      for (const auto& [model, view] : wanted) {
        const std::string want = ExpectedBytes(model, view);
        ExpectDirectBytes(ViewFileName(model, view), want);
        served += want.size();
      }
      nlohmann::json status = ViewStatus("big", "apr");
      EXPECT_EQ(status.value("bytes_read", uint64_t{0}), (pass + 1) * big.size()) << status.dump(2);
      EXPECT_EQ(status.value("cache_misses", uint64_t{1}), 0u) << status.dump(2);
      EXPECT_EQ(status.value("cache_hits", uint64_t{1}), 0u) << status.dump(2);
      EXPECT_TRUE(status["cached_bytes"].is_null()) << status.dump(2);
      // The second pass computes every byte the first did, again.
      for (const auto& [model, view] : wanted) {
        status = ViewStatus(model, view);
        const uint64_t computed = status.value("bytes_computed", uint64_t{0});
        EXPECT_EQ(status.value("cache_stored_bytes", uint64_t{1}), 0u) << status.dump(2);
        if (pass == 0) {
          EXPECT_GT(computed, 0u) << status.dump(2);
          computed_once[model + "." + view] = computed;
        } else {
          EXPECT_EQ(computed, 2 * computed_once[model + "." + view]) << status.dump(2);
        }
      }
    }
    const uint64_t written = WriteBytes(daemon_pid()) - written_before;
    EXPECT_LT(written, 1u << 20) << "the daemon wrote " << written << " bytes while serving "
                                 << served;
    EXPECT_LT(DiskUsage(CacheDir()), 64u << 10) << "the cache folder grew";
    EXPECT_FALSE(fs::exists(CacheDir() + "/views")) << "single-file verdicts kept on disk";
    UnmountCleanly();
  }
}


// `aprfs prefetch` of a computed file fills the computed cache through the mount: a view, and a
// plain .apr whose FP8 weights are dequantized. Reading it afterwards computes nothing; a second
// prefetch computes nothing either; a plain file with nothing computed has nothing to prefetch.
TEST_F(ViewCacheTest, PrefetchComputesEveryChunkOnceIntoTheCache) {
  SetWatchdog(240s);
  const std::string big = LargeFp8Reference();
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const std::string q4k = ExpectedBytes("qt", "q4k");
  ASSERT_NO_FATAL_FAILURE(MountViews());

  for (const auto& [model, view, want] :
       {std::tuple<std::string, std::string, const std::string*>{"qt", "q4k", &q4k},
        {"big", "apr", &big}}) {
    SCOPED_TRACE(model + " " + view);
    const std::string file = ViewFileName(model, view);
    ProcResult first = RunAprfs({"prefetch", MP(file)}, 180s);
    ASSERT_EQ(first.exit_code, 0) << first.Describe();
    const uint64_t stored = want->size() - 4;  // every chunk; the footer is never stored
    EXPECT_EQ(ViewFigure(model, view, "cached_bytes"), stored);
    EXPECT_NE(first.out.find(" of computed bytes cached ("), std::string::npos) << first.Describe();
    const uint64_t computed = ViewFigure(model, view, "bytes_computed");
    EXPECT_GT(computed, 0u);

    ExpectDirectBytes(file, *want);
    ProcResult again = RunAprfs({"prefetch", MP(file)}, 180s);
    ASSERT_EQ(again.exit_code, 0) << again.Describe();
    EXPECT_NE(again.out.find("(0 B computed now)"), std::string::npos) << again.Describe();
    EXPECT_EQ(ViewFigure(model, view, "bytes_computed"), computed) << "nothing computed again";
    EXPECT_EQ(ViewFigure(model, view, "cached_bytes"), stored);
  }

  ProcResult plain = RunAprfs({"prefetch", MP("qt.apr")}, 60s);
  EXPECT_EQ(plain.exit_code, 0) << plain.Describe();
  EXPECT_NE(plain.out.find("every shard is a local file: nothing to fetch"), std::string::npos)
      << plain.Describe();
}

}  // namespace
}  // namespace aprfs_itest
