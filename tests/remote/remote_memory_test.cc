// The memory downloads go to (--max-memory, fetch/chunk_memory.h): readers are served from it,
// it never holds more than its limit however the read-ahead runs, every chunk is still stored
// once, and status.json and the metrics say what it holds. A bad limit is a clear error.

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/prometheus_check.h"
#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

using aprfs_itest::ParsePrometheusText;
using aprfs_itest::PromParse;

class RemoteMemoryTest : public RemoteTest {
 protected:
  // The big model (3 shards of 3 chunks) from a fake Hub (hub_), mounted with `cache` and
  // `options`.
  AprfsMount* MountBig(const std::string& cache, const std::vector<std::string>& options) {
    hub_ = &StartHub("hub", {"--repo", "org/big=" + BigModel().dir});
    std::vector<std::string> args = {"--repo", "org/big", "--cache-dir", cache, "--no-hf-cache"};
    args.insert(args.end(), options.begin(), options.end());
    return Mount("mnt", args, Env(hub_->endpoint()));
  }
  HubFixture* hub_ = nullptr;
};

uint64_t U(const json& object, const char* key) { return object.value(key, uint64_t{0}); }

uint64_t ShardBytes(const SourceModel& model) {
  uint64_t bytes = 0;
  for (const std::string& shard : model.shards) bytes += model.ShardSize(shard);
  return bytes;
}

// A process's writes to the disk a folder is on, slowed down (the cgroup v1 blkio throttle) while
// this lives: its chunks are then stored long after readers were served them from memory.
class SlowDisk {
 public:
  SlowDisk(pid_t pid, const std::string& dir, uint64_t bytes_per_second)
      : pid_(pid), error_(Throttle(dir, bytes_per_second)) {}
  ~SlowDisk() {
    if (group_.empty()) return;
    Put(kRoot + "/cgroup.procs", std::to_string(pid_));  // (gone already: nothing to move)
    ::rmdir(group_.c_str());
  }
  const std::string& error() const { return error_; }

 private:
  static inline const std::string kRoot = "/sys/fs/cgroup/blkio";
  static bool Put(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text << std::flush;
    return static_cast<bool>(out);
  }
  static std::string Trimmed(std::string text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    return text;
  }
  // "" once the process is in a group of its own with the throttle set; else why not.
  std::string Throttle(const std::string& dir, uint64_t bytes_per_second) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return "cannot stat " + dir;
    // The throttle takes whole disks: a partition's disk is its parent in sysfs.
    std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    const std::string sys = "/sys/dev/block/" + dev;
    if (!std::filesystem::exists(sys + "/dev")) return dir + " is on no block device";
    if (std::filesystem::exists(sys + "/partition")) dev = Trimmed(SlurpOrEmpty(sys + "/../dev"));
    if (!std::filesystem::exists(kRoot + "/cgroup.procs")) return "no cgroup v1 blkio controller";
    const std::string group =
        kRoot + "/aprfs-test-" + std::to_string(::getpid()) + "-" + std::to_string(pid_);
    if (::mkdir(group.c_str(), 0755) != 0) return "cannot create " + group;
    group_ = group;
    if (!Put(group + "/blkio.throttle.write_bps_device",
             dev + " " + std::to_string(bytes_per_second)) ||
        !Put(group + "/cgroup.procs", std::to_string(pid_))) {
      return "cannot throttle " + dev + " in " + group;
    }
    return "";
  }

  pid_t pid_;
  std::string group_, error_;
};

// Waits (up to a minute) until the model's chunks are all stored and none is in flight.
bool AllStored(AprfsMount& mount, const std::string& file, uint64_t shard_bytes) {
  return WaitFor(
      [&] {
        json m = ModelEntry(ReadStatus(mount), file);
        return U(m, "cached_bytes") == shard_bytes && U(m, "in_flight") == 0;
      },
      60s);
}

// Two chunks of memory for a model of nine: a whole sequential read (and a second reader at
// random places meanwhile) gets exact bytes, the memory in use never exceeds the limit, and each
// chunk is fetched and stored exactly once.
TEST_F(RemoteMemoryTest, AWholeReadWithinTwoChunksOfMemoryIsExactAndStoresEveryChunkOnce) {
  SetWatchdog(180s);
  const SourceModel& big = BigModel();
  const std::string cache = Dir("cache");
  AprfsMount* mount = MountBig(cache, {"--max-memory", "16M", "--max-connections", "4"});
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  json status = ReadStatus(*mount);
  const uint64_t limit = 16u << 20;
  EXPECT_EQ(U(status["fetcher"]["memory"], "limit"), limit) << status.dump(2);

  // Sampled while the read runs: what status.json says is in use.
  std::atomic<bool> done{false};
  std::atomic<uint64_t> most_used{0}, samples{0};
  std::thread sampler([&] {
    while (!done) {
      json now = ReadStatus(*mount);
      const uint64_t used = U(now["fetcher"]["memory"], "used");
      if (used > most_used) most_used = used;
      ++samples;
      std::this_thread::sleep_for(5ms);
    }
  });
  DropPageCache(path);
  SequentialRead read = ReadSequentially(path);
  done = true;
  sampler.join();
  ASSERT_EQ(read.error, 0) << mount->Log();
  std::vector<std::string> problems = CheckAprBytes(read.bytes, big);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  EXPECT_GT(most_used.load(), 0u) << "no memory in use in " << samples << " samples";
  EXPECT_LE(most_used.load(), limit) << "more memory in use than --max-memory";

  // Quiet: every chunk stored once; what is in use is what is kept for readers, within the limit.
  const uint64_t shard_bytes = ShardBytes(big);
  ASSERT_TRUE(AllStored(*mount, "big.apr", shard_bytes)) << ReadStatus(*mount).dump(2);
  status = ReadStatus(*mount);
  json m = ModelEntry(status, "big.apr");
  EXPECT_EQ(U(m, "bytes_fetched"), shard_bytes) << "a chunk fetched twice, or not stored";
  EXPECT_EQ(U(m, "errors"), 0u);
  const json& memory = status["fetcher"]["memory"];
  EXPECT_EQ(U(memory, "used"), U(memory, "kept")) << memory.dump();
  EXPECT_LE(U(memory, "kept"), limit) << memory.dump();
  for (const std::string& shard : big.shards) {
    std::vector<std::string> wrong =
        CheckStoreAgainst(StoreDir(cache, hub_->Sha("org/big", shard)), big.ShardPath(shard));
    EXPECT_TRUE(wrong.empty()) << shard << ": " << Join(wrong);
  }
  PromParse metrics = ParsePrometheusText(SlurpOrEmpty(mount->Path(".aprfs/metrics")));
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems);
  EXPECT_EQ(metrics.Value("aprfs_chunk_memory_limit_bytes", {}), static_cast<double>(limit));
  EXPECT_LE(metrics.Value("aprfs_chunk_memory_bytes", {{"state", "used"}}),
            static_cast<double>(limit));
}

// Memory for the whole model and a slow cache disk (every chunk stored long after the reader was
// served it from memory): a sequential reader's chunks go once it is past them, also those whose
// storing ended after it passed them, and the last ones of each shard. Kept, they would fill the
// budget with bytes nobody reads again, and each cold read would touch all of it afresh (a page
// fault per 4 KiB): a reader that read the whole model leaves nothing in memory.
TEST_F(RemoteMemoryTest, ChunksASequentialReaderWentPastAreNotKept) {
  SetWatchdog(180s);
  const SourceModel& big = BigModel();
  const std::string cache = Dir("cache");
  AprfsMount* mount = MountBig(cache, {"--max-memory", "256M"});
  ASSERT_NE(mount, nullptr);
  // (Where the machine cannot slow the disk down, chunks are mostly stored before the reader
  // passes them, and the rest still holds.)
  SlowDisk slow(mount->pid(), cache, 8 << 20);  // ~1 s per chunk
  if (!slow.error().empty()) {
    std::fprintf(stderr, "the cache disk is not slowed down: %s\n", slow.error().c_str());
  }
  const std::string path = mount->Path("big.apr");
  DropPageCache(path);
  SequentialRead read = ReadSequentially(path);
  ASSERT_EQ(read.error, 0) << mount->Log();
  std::vector<std::string> problems = CheckAprBytes(read.bytes, big);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  if (slow.error().empty()) {
    EXPECT_GT(U(ModelEntry(ReadStatus(*mount), "big.apr"), "in_flight"), 0u)
        << "every chunk was stored before the read ended: the disk was not slowed down";
  }

  const uint64_t shard_bytes = ShardBytes(big);
  ASSERT_TRUE(AllStored(*mount, "big.apr", shard_bytes)) << ReadStatus(*mount).dump(2);
  const json memory = ReadStatus(*mount)["fetcher"]["memory"];
  EXPECT_EQ(U(memory, "kept"), 0u)
      << "chunks already read are kept in memory (the model is " << shard_bytes
      << " bytes): " << memory.dump();
}

TEST_F(RemoteMemoryTest, ATooSmallOrMalformedLimitIsAClearError) {
  for (const char* bad : {"1M", "lots"}) {
    ProcResult r = RunAprfs({"ls", "--repo", "org/none", "--cache-dir", Dir("cache"),
                             "--max-memory", bad},
                            {"HF_HUB_OFFLINE=1"});
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find(std::string("--max-memory ") + bad + ": expected a size of at least 16M"),
              std::string::npos)
        << r.Describe();
  }
}

}  // namespace
}  // namespace aprfs_rtest
