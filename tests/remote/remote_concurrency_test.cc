// Concurrency of the remote read path (issue 3): one fetch per missing chunk however many
// readers (threads of one process, or two daemons sharing the chunk cache) wait for it; a
// sequential reader gets range requests ahead of it over several reused connections; the
// chunk cache stays within --cache-size while every read stays correct.

#include <array>
#include <barrier>
#include <cerrno>
#include <cstring>
#include <set>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

// Two whole sequential reads started at the same moment, one per path.
std::array<SequentialRead, 2> ReadBothAtOnce(const std::string& first, const std::string& second) {
  std::barrier start(2);
  std::array<SequentialRead, 2> reads;
  std::thread other([&] {
    start.arrive_and_wait();
    reads[1] = ReadSequentially(second);
  });
  start.arrive_and_wait();
  reads[0] = ReadSequentially(first);
  other.join();
  return reads;
}

class RemoteConcurrencyTest : public RemoteTest {};

// Every chunk download of every shard of `model` happened at most once; the ones listed in
// `must` (shard index -> chunks) happened exactly once.
void ExpectOneDownloadPerChunk(const HubFixture& hub, const std::string& repo,
                               const SourceModel& model,
                               const std::map<size_t, std::set<uint64_t>>& must) {
  std::vector<AccessLine> log = hub.CdnLog();
  for (size_t i = 0; i < model.shards.size(); ++i) {
    const std::string& shard = model.shards[i];
    const std::string sha = hub.Sha(repo, shard);
    std::map<uint64_t, int> downloads = ChunkDownloads(log, sha, model.ShardSize(shard));
    for (const auto& [chunk, count] : downloads) {
      EXPECT_EQ(count, 1) << shard << ": chunk " << chunk << " downloaded " << count << " times:\n"
                          << Describe(LinesFor(log, sha));
    }
    auto it = must.find(i);
    if (it == must.end()) continue;
    for (uint64_t chunk : it->second) {
      EXPECT_EQ(downloads.count(chunk), 1u) << shard << ": chunk " << chunk << " never downloaded";
    }
  }
}

TEST_F(RemoteConcurrencyTest, EightThreadsReadingTheSameRegionFetchEachChunkOnce) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  AprfsMount* mount =
      Mount("mnt", {"--repo", "org/big", "--cache-dir", Dir("cache"), "--no-hf-cache"},
            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  // 12 MiB of blk.1.weight from 1 MiB on: chunks 0 and 1 of the second shard.
  const uint64_t within = 1 << 20, length = 12 << 20;
  const uint64_t offset = AprOffsetOf(layout, "blk.1.weight", within);
  const std::string want = big.TensorBytes("blk.1.weight").substr(within, length);
  const SourceTensor& t = big.tensors.at("blk.1.weight");
  std::set<uint64_t> touched;
  for (uint64_t b = t.shard_offset + within; b < t.shard_offset + within + length; b += 4096) {
    touched.insert(b / kChunk);
  }
  ASSERT_GE(touched.size(), 2u);

  constexpr int kThreads = 8;
  std::barrier start(kThreads);
  std::vector<std::string> got(kThreads);
  std::vector<int> errors(kThreads, -2);
  std::vector<double> seconds(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      errors[i] = ReadRange(path, offset, length, &got[i], &seconds[i]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(errors[i], 0) << "thread " << i << ": "
                            << (errors[i] > 0 ? std::strerror(errors[i]) : "short");
    EXPECT_TRUE(got[i] == want) << "thread " << i << " read other bytes";
    EXPECT_LT(seconds[i], 30.0);
  }
  ExpectOneDownloadPerChunk(hub, "org/big", big, {{1, touched}});
}

TEST_F(RemoteConcurrencyTest, TwoDaemonsSharingTheCacheFetchEachChunkOnce) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  const std::vector<std::string> args = {"--repo", "org/big", "--cache-dir", cache,
                                         "--no-hf-cache"};
  AprfsMount* a = Mount("mnt-a", args, Env(hub.endpoint()));
  AprfsMount* b = Mount("mnt-b", args, Env(hub.endpoint()));
  ASSERT_TRUE(a && b);
  // Plans first (the second daemon finds the headers in the metadata cache).
  ASSERT_GT(FileSize(a->Path("big.apr")), 0u);
  ASSERT_EQ(FileSize(b->Path("big.apr")), FileSize(a->Path("big.apr")));

  std::array<SequentialRead, 2> reads =
      ReadBothAtOnce(a->Path("big.apr"), b->Path("big.apr"));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(reads[i].error, 0) << "daemon " << i << ": "
                                 << std::strerror(std::max(0, reads[i].error));
    std::vector<std::string> problems = CheckAprBytes(reads[i].bytes, big);
    EXPECT_TRUE(problems.empty()) << "daemon " << i << ":\n" << Join(problems);
  }
  std::map<size_t, std::set<uint64_t>> all;
  for (size_t i = 0; i < big.shards.size(); ++i) {
    for (uint64_t c = 0; c < ChunkCount(big.ShardSize(big.shards[i])); ++c) all[i].insert(c);
  }
  ExpectOneDownloadPerChunk(hub, "org/big", big, all);
  std::vector<AccessLine> log = hub.CdnLog();
  for (const std::string& shard : big.shards) {
    int headers = 0;
    for (const AccessLine& line : LinesFor(log, hub.Sha("org/big", shard))) {
      headers += IsHeaderRange(line, big.ShardSize(shard));
    }
    EXPECT_EQ(headers, 1) << shard << ": header fetched " << headers << " times";
  }
}

// Two daemons sharing the chunk cache and the HF cache: each chunk fetched once, each shard
// verified and published once into a correct layout, both serving correct bytes throughout.
TEST_F(RemoteConcurrencyTest, TwoDaemonsSharingBothCachesPublishCorrectly) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache"), hf = Dir("hf");
  const std::vector<std::string> args = {"--repo", "org/big",    "--cache-dir",
                                         cache,    "--hf-cache", hf};
  AprfsMount* a = Mount("mnt-a", args, Env(hub.endpoint()));
  AprfsMount* b = Mount("mnt-b", args, Env(hub.endpoint()));
  ASSERT_TRUE(a && b);
  ASSERT_EQ(FileSize(b->Path("big.apr")), FileSize(a->Path("big.apr")));
  std::array<SequentialRead, 2> reads =
      ReadBothAtOnce(a->Path("big.apr"), b->Path("big.apr"));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(reads[i].error, 0) << "daemon " << i;
    std::vector<std::string> problems = CheckAprBytes(reads[i].bytes, big);
    EXPECT_TRUE(problems.empty()) << "daemon " << i << ":\n" << Join(problems);
  }
  const std::string commit = hub.Commit("org/big");
  bool published = WaitFor(
      [&] {
        for (const std::string& shard : big.shards) {
          if (!CheckPublished(hf, "org/big", commit, "main", shard, hub.Sha("org/big", shard),
                              big.ShardPath(shard))
                   .empty() ||
              PathExists(StoreDir(cache, hub.Sha("org/big", shard)))) {
            return false;
          }
        }
        return true;
      },
      30s);
  EXPECT_TRUE(published);
  for (const std::string& shard : big.shards) {
    std::vector<std::string> problems = CheckPublished(
        hf, "org/big", commit, "main", shard, hub.Sha("org/big", shard), big.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << Join(problems);
  }
  EXPECT_EQ(ListDir(hf + "/" + RepoFolder("org/big") + "/blobs").size(), big.shards.size());
  std::map<size_t, std::set<uint64_t>> all;
  for (size_t i = 0; i < big.shards.size(); ++i) {
    for (uint64_t c = 0; c < ChunkCount(big.ShardSize(big.shards[i])); ++c) all[i].insert(c);
  }
  ExpectOneDownloadPerChunk(hub, "org/big", big, all);
  // Both mounts still serve the file, now from the published blobs.
  for (AprfsMount* m : {a, b}) {
    DropPageCache(m->Path("big.apr"));
    SequentialRead again = ReadSequentially(m->Path("big.apr"));
    EXPECT_EQ(again.error, 0);
    EXPECT_TRUE(CheckAprBytes(again.bytes, big).empty());
  }
}

TEST_F(RemoteConcurrencyTest, SequentialReadPrefetchesAheadOverReusedConnections) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const unsigned kConnections = 3;
  AprfsMount* mount = Mount("mnt",
                            {"--repo", "org/big", "--cache-dir", Dir("cache"), "--no-hf-cache",
                             "--max-connections", std::to_string(kConnections)},
                            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  const SourceTensor& first = big.tensors.at("blk.0.weight");
  const std::string sha0 = hub.Sha("org/big", big.shards[0]);
  const uint64_t size0 = big.ShardSize(big.shards[0]);

  // Read sequentially up to 2 MiB into the first shard's big tensor, then stop reading.
  Fd fd(path, O_RDONLY);
  ASSERT_TRUE(fd.ok());
  const uint64_t stop_at = AprOffsetOf(layout, "blk.0.weight", 2 << 20);
  std::string bytes;
  std::string buffer(256 << 10, '\0');
  while (bytes.size() < stop_at) {
    ssize_t n =
        ::read(fd.get(), buffer.data(), std::min<uint64_t>(buffer.size(), stop_at - bytes.size()));
    ASSERT_GT(n, 0) << std::strerror(errno);
    bytes.append(buffer.data(), static_cast<size_t>(n));
  }
  // The reader is inside chunk 0 of the shard (plus at most the kernel's 1 MiB readahead);
  // requests for chunks 1 and 2 exist although nobody asked for them yet.
  const uint64_t reader_in_shard = first.shard_offset + (2 << 20) + (1 << 20);
  ASSERT_LT(reader_in_shard, kChunk);
  bool ahead = WaitFor(
      [&] {
        std::map<uint64_t, int> chunks = ChunkDownloads(hub.CdnLog(), sha0, size0);
        return chunks.count(1) && chunks.count(2);
      },
      10s);
  EXPECT_TRUE(ahead) << "no request ahead of a sequential reader at shard offset "
                     << reader_in_shard << ":\n"
                     << Describe(LinesFor(hub.CdnLog(), sha0));

  // The rest of the file.
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GE(n, 0) << std::strerror(errno);
    if (n == 0) break;
    bytes.append(buffer.data(), static_cast<size_t>(n));
  }
  std::vector<std::string> problems = CheckAprBytes(bytes, big);
  EXPECT_TRUE(problems.empty()) << Join(problems);

  // Several connections, each reused: chunk requests come from at most --max-connections
  // connections (the workers'), at least two of them, and some connection served several.
  std::vector<AccessLine> log = hub.CdnLog();
  std::map<uint64_t, int> per_conn;
  size_t chunks_fetched = 0;
  uint64_t max_req = 0;
  for (const std::string& shard : big.shards) {
    for (const AccessLine& line : LinesFor(log, hub.Sha("org/big", shard))) {
      if (!IsChunkRange(line, big.ShardSize(shard))) continue;
      ++per_conn[line.conn];
      chunks_fetched += ChunksOf(line).size();
      max_req = std::max(max_req, line.req);
    }
  }
  EXPECT_EQ(chunks_fetched, 9u) << Describe(log);
  EXPECT_GE(per_conn.size(), 2u) << "all chunk requests on one connection:\n" << Describe(log);
  EXPECT_LE(per_conn.size(), kConnections) << "connections not reused:\n" << Describe(log);
  EXPECT_GE(max_req, 2u) << "no connection served a second request:\n" << Describe(log);
}

// Several range requests in parallel: with every answer paced to 8 MiB/s (about 1 s per
// chunk), a cold sequential read of a 10-chunk file over the default 8 connections has several
// chunks downloading at the same time (the server counts them), over several connections.
TEST_F(RemoteConcurrencyTest, SequentialReadDownloadsOverParallelConnections) {
  const SourceModel& model = LargeSingleModel();
  FaultServer& server = StartFault("fault", model.ShardPath("model.safetensors"),
                                   {"--path", "model.safetensors", "--then", "slow:8388608"});
  AprfsMount* mount =
      Mount("mnt", {"--repo", "fault/model", "--cache-dir", Dir("cache"), "--no-hf-cache"},
            Env(server.endpoint()));
  ASSERT_NE(mount, nullptr);
  ASSERT_EQ(ParseAprFile(mount->Path("model.apr")).error, "");
  ASSERT_TRUE(server.Reset());
  ASSERT_TRUE(server.Plan(R"({"plan": [], "then": "slow:8388608"})"));
  SequentialRead read = ReadSequentially(mount->Path("model.apr"));
  EXPECT_EQ(read.error, 0);
  EXPECT_TRUE(CheckAprBytes(read.bytes, model).empty());
  json stats = server.Stats();
  std::set<int> conns;
  for (const json& entry : stats["log"]) conns.insert(entry.value("conn", 0));
  const int max_in_flight = stats.value("max_in_flight", 0);
  std::fprintf(stderr, "[ note ] %.1f s for %zu bytes over %zu connections, %d at once\n",
               read.seconds, read.bytes.size(), conns.size(), max_in_flight);
  // What the daemon did, not how long it took (the time is a benchmark's, and a busy machine's):
  // the chunks (1 s each at this rate) were downloaded side by side, over several connections.
  EXPECT_GE(max_in_flight, 3) << "no parallelism: " << stats["log"].dump();
  EXPECT_GE(conns.size(), 4u);
  // Each chunk once (a request may span several).
  uint64_t chunks = 0;
  for (const json& entry : stats["log"]) {
    unsigned long long a, b;
    if (entry.value("status", 0) == 206 &&
        std::sscanf(entry.value("range", "").c_str(), "bytes=%llu-%llu", &a, &b) == 2) {
      chunks += b / kChunk - a / kChunk + 1;
    }
  }
  EXPECT_EQ(chunks, 10u) << "each chunk once: " << stats["log"].dump();
}

// A sequential reader's read-ahead goes out in requests spanning several chunks (what a store
// serves cheapest), each chunk stored as soon as its bytes are in; a request cut mid-body keeps
// the chunks it completed, and the one it stopped in is fetched again, after the retry delay of
// its failure. With 2 connections every request after the first is a span (the read-ahead
// window is wide at once), and the plan cuts the next two and refuses the one after (503).
TEST_F(RemoteConcurrencyTest, ReadAheadSpansSeveralChunksAndACutSpanIsResumedExactly) {
  const SourceModel& model = LargeSingleModel();
  FaultServer& server = StartFault("fault", model.ShardPath("model.safetensors"),
                                   {"--path", "model.safetensors"});
  AprfsMount* mount = Mount("mnt",
                            {"--repo", "fault/model", "--cache-dir", Dir("cache"), "--no-hf-cache",
                             "--max-connections", "2"},
                            Env(server.endpoint()));
  ASSERT_NE(mount, nullptr);
  ASSERT_EQ(ParseAprFile(mount->Path("model.apr")).error, "");
  ASSERT_TRUE(server.Reset());
  ASSERT_TRUE(server.Plan(R"(["ok", "cut", "cut", "status:503:1"])"));
  SequentialRead read = ReadSequentially(mount->Path("model.apr"));
  ASSERT_EQ(read.error, 0) << mount->Log();
  EXPECT_TRUE(CheckAprBytes(read.bytes, model).empty());
  json stats = server.Stats();
  uint64_t spans = 0, cut_spans = 0;
  std::map<uint64_t, int> stored;  // chunk -> complete 206 answers covering it
  for (const json& entry : stats["log"]) {
    unsigned long long a, b;
    if (std::sscanf(entry.value("range", "").c_str(), "bytes=%llu-%llu", &a, &b) != 2) continue;
    const bool span = b / kChunk > a / kChunk;
    spans += span;
    cut_spans += span && entry.value("mode", "") == "cut";
    if (entry.value("status", 0) == 206 && entry.value("mode", "") == "ok") {
      for (uint64_t chunk = a / kChunk; chunk <= b / kChunk; ++chunk) ++stored[chunk];
    }
  }
  EXPECT_GE(spans, 2u) << "no request spanned several chunks: " << stats["log"].dump();
  EXPECT_GE(cut_spans, 1u) << "no span was cut: " << stats["log"].dump();
  // Every chunk came whole from some answer; none twice from complete ones.
  for (uint64_t chunk = 0; chunk < ChunkCount(model.ShardSize("model.safetensors")); ++chunk) {
    EXPECT_LE(stored[chunk], 1) << "chunk " << chunk << " downloaded twice: " << stats["log"].dump();
  }
  EXPECT_EQ(mount->LogText().find("failed"), std::string::npos) << mount->Log();
}

// Reads that a caller waits for go before prefetch: with one connection and each chunk taking
// ~1 s, a sequential reader queues read-ahead for the whole file; a read of the last chunk
// then waits for the download in progress and its own, not for the whole queue: its request
// reaches the server right after the one in progress (the server numbers requests as they come).
TEST_F(RemoteConcurrencyTest, DemandReadsOvertakeQueuedPrefetch) {
  const SourceModel& model = LargeSingleModel();
  FaultServer& server =
      StartFault("fault", model.ShardPath("model.safetensors"), {"--path", "model.safetensors"});
  AprfsMount* mount = Mount("mnt",
                            {"--repo", "fault/model", "--cache-dir", Dir("cache"), "--no-hf-cache",
                             "--max-connections", "1"},
                            Env(server.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("model.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  ASSERT_TRUE(server.Reset());
  ASSERT_TRUE(server.Plan(R"({"plan": [], "then": "slow:8388608"})"));
  // 2 MiB in 128 KiB sequential O_DIRECT reads: the stream's window reaches the whole file.
  const uint64_t start = AprOffsetOf(layout, "l.weight");
  std::string got;
  for (uint64_t at = 0; at < (2u << 20); at += 128 << 10) {
    ASSERT_EQ(ReadRange(path, start + at, 128 << 10, &got), 0);
  }
  const std::string weight = model.TensorBytes("l.weight");
  const uint64_t within = weight.size() - 5000;  // in the last chunk
  const uint64_t last_chunk =
      (model.tensors.at("l.weight").shard_offset + within) / kChunk * kChunk;
  const int before = server.Stats().value("requests", 0);
  double seconds = 0;
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "l.weight", within), 4096, &got, &seconds), 0);
  EXPECT_TRUE(got == weight.substr(within, 4096));
  // The server logs a request once answered: wait for the last chunk's entry.
  const std::string range = "bytes=" + std::to_string(last_chunk) + "-";
  json entry;
  json stats;
  WaitFor(
      [&] {
        stats = server.Stats();
        for (const json& e : stats.value("log", json::array())) {
          const json r = e.value("range", json());
          if (r.is_string() && r.get<std::string>().rfind(range, 0) == 0) {
            entry = e;
            return true;
          }
        }
        return false;
      },
      30s);
  ASSERT_FALSE(entry.is_null()) << "no request for the last chunk: " << stats["log"].dump();
  const int n = entry.value("n", 0);
  std::fprintf(stderr,
               "[ note ] the last chunk came after %.1f s as request %d; %d requests before it\n",
               seconds, n, before);
  // Behind the queue it would be request ~10; ahead of it, the next after the one in progress
  // (one more when a prefetch was handed the connection just before the read came).
  EXPECT_LE(n, before + 2) << "the demand read waited behind prefetch: " << stats["log"].dump();
}

// Samples the present bytes of every chunk store of a cache dir (from the map files) and keeps
// the peak.
class CacheSampler {
 public:
  explicit CacheSampler(std::string cache) : cache_(std::move(cache)), thread_([this] { Run(); }) {}
  ~CacheSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t peak() const { return peak_; }

 private:
  void Run() {
    while (!stop_) {
      uint64_t now = PresentBytesInCache(cache_);
      if (now > peak_) peak_ = now;
      std::this_thread::sleep_for(10ms);
    }
  }
  std::string cache_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::thread thread_;
};

constexpr uint64_t kLimit = 24ull << 20;

// With --cache-size 24M and a 57 MiB model: every read of the whole file is correct, least
// recently used chunks are evicted down to the limit, and evicted chunks are fetched again.
TEST_F(RemoteConcurrencyTest, CacheSizeLimitEvictsAndReadsStayCorrect) {
  SetWatchdog(120s);
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  AprfsMount* mount = Mount(
      "mnt", {"--repo", "org/big", "--cache-dir", cache, "--no-hf-cache", "--cache-size", "24M"},
      Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  size_t downloads_after_first = 0;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("read " + std::to_string(round + 1));
    DropPageCache(mount->Path("big.apr"));
    SequentialRead read = ReadSequentially(mount->Path("big.apr"));
    EXPECT_EQ(read.error, 0) << std::strerror(std::max(0, read.error));
    std::vector<std::string> problems = CheckAprBytes(read.bytes, big);
    EXPECT_TRUE(problems.empty()) << Join(problems);
    bool settled = WaitFor([&] { return PresentBytesInCache(cache) <= kLimit; }, 15s);
    EXPECT_TRUE(settled) << "still " << PresentBytesInCache(cache) << " bytes after 15 s";
    for (const std::string& shard : big.shards) {
      std::vector<std::string> wrong =
          CheckStoreAgainst(StoreDir(cache, hub.Sha("org/big", shard)), big.ShardPath(shard));
      EXPECT_TRUE(wrong.empty()) << Join(wrong);
    }
    if (round == 0) downloads_after_first = DataRequestCount(hub.CdnLog());
  }
  EXPECT_GT(DataRequestCount(hub.CdnLog()), downloads_after_first)
      << "the second read fetched nothing again: nothing was evicted";
}

TEST_F(RemoteConcurrencyTest, CacheSizeLimitHoldsWhileChunksArrive) {
  SetWatchdog(120s);
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  AprfsMount* mount = Mount(
      "mnt", {"--repo", "org/big", "--cache-dir", cache, "--no-hf-cache", "--cache-size", "24M"},
      Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  CacheSampler sampler(cache);
  for (int round = 0; round < 2; ++round) {
    DropPageCache(mount->Path("big.apr"));
    SequentialRead read = ReadSequentially(mount->Path("big.apr"));
    EXPECT_EQ(read.error, 0);
    EXPECT_TRUE(CheckAprBytes(read.bytes, big).empty());
  }
  sampler.Stop();
  // In-flight downloads may briefly add a chunk per connection on top of the limit.
  EXPECT_LE(sampler.peak(), kLimit + 2 * kChunk)
      << "the chunk stores held " << sampler.peak() / double(1 << 20)
      << " MiB with --cache-size 24M";
}

}  // namespace
}  // namespace aprfs_rtest
