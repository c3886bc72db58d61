// Remote load (issue 5): 16 readers at random offsets and sizes over a three-shard --repo model
// whose --cache-size holds three of its nine chunks, so chunks are evicted and fetched again all
// the time while readers wait for them. Every byte is compared with the file materialized from
// the plan of the source folder; each read has a deadline (a monitor kills the daemon, so that
// blocked reads return, and fails the test); operations and bytes are reported.
//
// APRFS_LOAD_SECONDS sets the duration. The default is 30 s here, not the 60 s of the local
// load test: this one runs in the remote suite of every CI run. APRFS_TEST_SEED repeats a run.

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

constexpr int kReaders = 16;
constexpr auto kReadDeadline = 20s;  // the daemon's own is 60 s (RemoteOptions::read_deadline)

int LoadSeconds() {
  const char* text = std::getenv("APRFS_LOAD_SECONDS");
  int seconds = text ? std::atoi(text) : 0;
  return seconds > 0 ? seconds : 30;
}

// One reader's random request: mostly small, some up to 4 MiB (across chunk and shard ends).
std::pair<uint64_t, uint64_t> RandomRange(std::mt19937_64& random, uint64_t size) {
  const uint64_t kind = random() % 10;
  const uint64_t max = kind < 5 ? (64 << 10) : kind < 9 ? (1 << 20) : (4 << 20);
  const uint64_t length = 1 + random() % max;
  return {random() % (size - length + 1), length};
}

struct Reader {
  std::atomic<int64_t> busy_since_ns{0};  // 0: not in a read
  std::atomic<uint64_t> offset{0}, length{0};
  uint64_t ops = 0, bytes = 0;
  double slowest = 0;
  std::string problem;
};

int64_t NowNs() { return Clock::now().time_since_epoch().count(); }

class RemoteLoadTest : public RemoteTest {};

TEST_F(RemoteLoadTest, SixteenReadersAtRandomRangesUnderConstantEviction) {
  const int seconds = LoadSeconds();
  SetWatchdog(std::chrono::seconds(seconds + 120));
  const SourceModel& big = BigModel();
  const std::string expected = MaterializedApr(big, "big", "hf://org/big");
  ASSERT_TRUE(CheckAprBytes(expected, big).empty()) << "the reference itself is wrong";

  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  const uint64_t limit = 3 * kChunk;
  AprfsMount* mount = Mount("mnt",
                            {"--repo", "org/big", "--cache-dir", cache, "--no-hf-cache",
                             "--cache-size", std::to_string(limit)},
                            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  ASSERT_EQ(FileSize(path), expected.size()) << "the mounted file is not the materialized plan";

  const char* seed_text = std::getenv("APRFS_TEST_SEED");
  const uint64_t seed = seed_text ? std::strtoull(seed_text, nullptr, 10) : std::random_device{}();
  std::fprintf(stderr, "[ note ] seed %llu, %d readers for %d s (APRFS_TEST_SEED, APRFS_LOAD_SECONDS)\n",
               static_cast<unsigned long long>(seed), kReaders, seconds);
  std::atomic<bool> stop{false};
  std::atomic<int> running{kReaders};
  std::vector<Reader> readers(kReaders);
  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) {
    threads.emplace_back([&, i] {
      Reader& me = readers[i];
      struct Done {
        std::atomic<bool>& stop;
        std::atomic<int>& running;
        ~Done() {
          stop = true;  // one problem (or the end) ends the run
          --running;
        }
      } done{stop, running};
      std::mt19937_64 random(seed + i);
      // Three in four read with O_DIRECT (every read reaches the daemon), the others through
      // the page cache and the kernel's readahead.
      Fd fd(path, O_RDONLY | (i % 4 != 3 ? O_DIRECT : 0));
      if (!fd.ok()) {
        me.problem = std::string("open: ") + std::strerror(errno);
        return;
      }
      std::string got;
      while (!stop) {
        auto [offset, length] = RandomRange(random, expected.size());
        got.resize(length);
        me.offset = offset;
        me.length = length;
        const int64_t start = NowNs();
        me.busy_since_ns = start;
        int64_t n = PreadFull(fd.get(), got.data(), length, offset);
        me.busy_since_ns = 0;
        me.slowest = std::max(me.slowest, (NowNs() - start) / 1e9);
        const std::string where = std::to_string(length) + " bytes at " + std::to_string(offset);
        if (n != static_cast<int64_t>(length)) {
          me.problem = "read of " + where + ": " +
                       (n < 0 ? std::strerror(static_cast<int>(-n)) : "short read");
          break;
        }
        if (std::memcmp(got.data(), expected.data() + offset, length) != 0) {
          uint64_t at = 0;
          while (got[at] == expected[offset + at]) ++at;
          me.problem = "read of " + where + ": wrong byte at " + std::to_string(offset + at);
          break;
        }
        ++me.ops;
        me.bytes += length;
      }
    });
  }
  // The deadline per read, watched until the last reader is done: a read past it is a hang.
  // Killing the daemon makes it return.
  std::string hang;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (running > 0) {
    std::this_thread::sleep_for(100ms);
    if (Clock::now() >= end) stop = true;
    for (int i = 0; i < kReaders && hang.empty(); ++i) {
      const int64_t since = readers[i].busy_since_ns;
      if (since != 0 && NowNs() - since > std::chrono::nanoseconds(kReadDeadline).count()) {
        hang = "reader " + std::to_string(i) + ": the read of " +
               std::to_string(readers[i].length.load()) + " bytes at " +
               std::to_string(readers[i].offset.load()) + " did not return within " +
               std::to_string(kReadDeadline.count()) + " s";
        mount->Kill();
        stop = true;
      }
    }
  }
  for (std::thread& thread : threads) thread.join();

  uint64_t ops = 0, bytes = 0, direct_ops = 0, direct_bytes = 0;
  double slowest = 0;
  for (int i = 0; i < kReaders; ++i) {
    ops += readers[i].ops;
    bytes += readers[i].bytes;
    if (i % 4 != 3) direct_ops += readers[i].ops, direct_bytes += readers[i].bytes;
    slowest = std::max(slowest, readers[i].slowest);
    EXPECT_EQ(readers[i].problem, "") << "reader " << i << " (seed " << seed << ")";
  }
  EXPECT_EQ(hang, "") << "seed " << seed;
  // What the Hub served: chunks downloaded again after being evicted.
  uint64_t downloads = 0, distinct = 0;
  for (const std::string& shard : big.shards) {
    std::map<uint64_t, int> chunks =
        ChunkDownloads(hub.CdnLog(), hub.Sha("org/big", shard), big.ShardSize(shard));
    distinct += chunks.size();
    for (const auto& [chunk, count] : chunks) downloads += count;
  }
  std::fprintf(stderr,
               "[ note ] %llu reads, %.1f MiB (%.1f MiB/s; O_DIRECT: %llu reads, %.1f MiB), "
               "slowest read %.2f s; %llu chunk downloads of %llu distinct chunks\n",
               static_cast<unsigned long long>(ops), bytes / 1048576.0,
               bytes / 1048576.0 / seconds, static_cast<unsigned long long>(direct_ops),
               direct_bytes / 1048576.0, slowest, static_cast<unsigned long long>(downloads),
               static_cast<unsigned long long>(distinct));
  EXPECT_GE(direct_ops, static_cast<uint64_t>(kReaders) * 10) << "hardly any load";
  EXPECT_GT(downloads, distinct) << "no chunk was evicted and fetched again: no eviction tested";
  ASSERT_TRUE(mount->Alive()) << mount->Log();
  json m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_EQ(m.value("errors", 1), 0) << m.dump(2);
  EXPECT_EQ(m.value("failed_requests", 1), 0) << m.dump(2);
  EXPECT_TRUE(WaitFor([&] { return PresentBytesInCache(cache) <= limit; }, 15s))
      << PresentBytesInCache(cache) << " bytes cached, over the limit";
  Unmount(mount);
  for (const std::string& shard : big.shards) {
    std::vector<std::string> problems =
        CheckStoreAgainst(StoreDir(cache, hub.Sha("org/big", shard)), big.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << shard << ": " << Join(problems);
  }
}

}  // namespace
}  // namespace aprfs_rtest
