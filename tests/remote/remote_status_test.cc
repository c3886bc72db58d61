// What `.aprfs/status.json`, `.aprfs/metrics` and the xattrs say about a remote model (issue 4,
// "true figures that change as a test reads and fetches"): every figure is checked against an
// independent witness — the CDN's access log (requests, bytes), the chunk stores' maps on disk
// (cached bytes), the source files (sizes, hashes) — before, during and after reads.

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "tests/integration/prometheus_check.h"
#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

using aprfs_itest::ParsePrometheusText;
using aprfs_itest::PromParse;

uint64_t U(const json& object, const char* key) { return object.value(key, uint64_t{0}); }

// No download running or queued for the model (status says so) and the CDN log agrees.
bool Quiet(const AprfsMount& mount, const std::string& name) {
  json m = ModelEntry(ReadStatus(mount), name);
  return U(m, "in_flight") == 0 && m["queued"].value("demand", 1) == 0 &&
         m["queued"].value("prefetch", 1) == 0;
}

// Chunk requests the CDN saw for these blobs: how many, and the bytes of the 206 ones.
struct CdnChunks {
  uint64_t requests = 0;
  uint64_t bytes = 0;
};
CdnChunks ChunksServed(const std::vector<AccessLine>& log, const SourceModel& model,
                       const HubFixture& hub, const std::string& repo) {
  CdnChunks out;
  for (const std::string& shard : model.shards) {
    for (const AccessLine& line : LinesFor(log, hub.Sha(repo, shard))) {
      if (IsHeaderRange(line, model.ShardSize(shard))) continue;
      ++out.requests;
      if (line.status == 206) out.bytes += line.last - line.first + 1;
    }
  }
  return out;
}

std::string Xattr(const std::string& path, const std::string& name) {
  char value[512];
  ssize_t n = getxattr(path.c_str(), name.c_str(), value, sizeof(value));
  if (n < 0) return std::string("<") + std::strerror(errno) + ">";
  return std::string(value, static_cast<size_t>(n));
}

class RemoteStatusTest : public RemoteTest {};

TEST_F(RemoteStatusTest, FiguresFollowFetchesAndTheChunkCache) {
  SetWatchdog(180s);
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  const std::string hf = Dir("hf");
  AprfsMount* mount = Mount("mnt",
                            {"--repo", "org/big", "--cache-dir", cache, "--hf-cache", hf,
                             "--cache-size", "1G", "--max-connections", "4"},
                            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");

  // Known, not looked up yet.
  json status = ReadStatus(*mount);
  EXPECT_EQ(status.value("cache_dir", ""), cache);
  EXPECT_EQ(status.value("hf_cache", ""), hf);
  EXPECT_EQ(U(status, "cache_size_limit"), 1ull << 30);
  EXPECT_EQ(status["fetcher"].value("workers", 0), 4);
  json m = ModelEntry(status, "big.apr");
  EXPECT_EQ(m.value("state", ""), "not-yet-looked-up");
  EXPECT_EQ(m.value("kind", ""), "remote");
  EXPECT_EQ(m.value("source", ""), "hf://org/big");
  EXPECT_EQ(m.value("requested_revision", ""), "main");
  EXPECT_TRUE(m["revision"].is_null());
  EXPECT_EQ(m["names"], json::array({"big.apr", "org/big.apr"}));

  // Looked up: built from the headers alone, nothing in the chunk cache.
  const uint64_t size = FileSize(path);
  m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_EQ(m.value("state", ""), "ready");
  EXPECT_EQ(m.value("revision", ""), hub.Commit("org/big"));
  EXPECT_EQ(U(m, "size"), size);
  ASSERT_EQ(m["shards"].size(), big.shards.size());
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < big.shards.size(); ++i) {
    const json& shard = m["shards"][i];
    EXPECT_EQ(shard.value("file", ""), big.shards[i]);
    EXPECT_EQ(U(shard, "size"), big.ShardSize(big.shards[i]));
    EXPECT_EQ(shard.value("sha256", ""), hub.Sha("org/big", big.shards[i]));
    EXPECT_EQ(shard.value("sha256", ""), Sha256OfFile(big.ShardPath(big.shards[i])));
    EXPECT_TRUE(shard["local_path"].is_null());
    EXPECT_EQ(U(shard, "cached_bytes"), 0u);
    EXPECT_EQ(shard.value("published", true), false);
    shard_bytes += big.ShardSize(big.shards[i]);
  }
  EXPECT_EQ(U(m, "bytes_fetched"), 0u);
  EXPECT_EQ(U(m, "requests"), 0u);
  EXPECT_EQ(U(m, "cached_bytes"), 0u);

  // The index (a buffered read: the kernel's readahead may reach into shard 1's data and start
  // our read-ahead). Once quiet, the figures equal the CDN's and the chunk maps'.
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  ASSERT_TRUE(WaitFor([&] { return Quiet(*mount, "big.apr"); }, 30s));
  m = ModelEntry(ReadStatus(*mount), "big.apr");
  CdnChunks served = ChunksServed(hub.CdnLog(), big, hub, "org/big");
  EXPECT_EQ(U(m, "requests"), served.requests);
  EXPECT_EQ(U(m, "bytes_fetched"), served.bytes);
  EXPECT_EQ(U(m, "chunks_fetched"), served.requests);
  EXPECT_EQ(U(m, "failed_requests"), 0u);
  for (size_t i = 0; i < big.shards.size(); ++i) {
    ChunkMap map = ReadChunkMap(StoreDir(cache, hub.Sha("org/big", big.shards[i])));
    ASSERT_EQ(map.error, "");
    EXPECT_EQ(U(m["shards"][i], "cached_bytes"), map.PresentBytes()) << big.shards[i];
  }

  // One small O_DIRECT read at the start of shard 3: exactly one more chunk, 8 MiB.
  const uint64_t read_before = U(m, "bytes_read");
  const uint64_t fetched_before = U(m, "bytes_fetched");
  const uint64_t requests_before = U(m, "requests");
  std::string got;
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.2.norm"), 4004, &got), 0);
  EXPECT_EQ(got, big.TensorBytes("blk.2.norm"));
  ASSERT_TRUE(WaitFor([&] { return Quiet(*mount, "big.apr"); }, 30s));
  m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_EQ(U(m, "bytes_read"), read_before + 4004);
  EXPECT_EQ(U(m, "bytes_fetched"), fetched_before + kChunk);
  EXPECT_EQ(U(m, "requests"), requests_before + 1);
  EXPECT_EQ(U(m["shards"][2], "cached_bytes"), kChunk);
  EXPECT_EQ(Xattr(path, "user.aprfs.bytes_fetched"), std::to_string(fetched_before + kChunk));

  // The whole file: every shard complete (cached = size), each chunk fetched once, then
  // verified and published into the HF cache.
  DropPageCache(path);
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(path, &bytes, &error)) << error;
  EXPECT_TRUE(CheckAprBytes(bytes, big).empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        json now = ModelEntry(ReadStatus(*mount), "big.apr");
        for (const json& shard : now["shards"]) {
          if (!shard.value("published", false)) return false;
        }
        return Quiet(*mount, "big.apr");
      },
      60s))
      << ReadStatus(*mount).dump(2) << mount->Log();
  m = ModelEntry(ReadStatus(*mount), "big.apr");
  for (size_t i = 0; i < big.shards.size(); ++i) {
    EXPECT_EQ(U(m["shards"][i], "cached_bytes"), big.ShardSize(big.shards[i])) << big.shards[i];
  }
  EXPECT_EQ(U(m, "cached_bytes"), shard_bytes);
  EXPECT_EQ(U(m, "bytes_fetched"), shard_bytes) << "a chunk was fetched twice, or not counted";
  served = ChunksServed(hub.CdnLog(), big, hub, "org/big");
  EXPECT_EQ(U(m, "bytes_fetched"), served.bytes);
  EXPECT_EQ(U(m, "requests"), served.requests);
  EXPECT_EQ(U(m, "errors"), 0u);
  EXPECT_GE(U(m, "bytes_read"), read_before + 4004 + size);

  // The same figures in the metrics and the xattrs.
  std::string text = SlurpOrEmpty(mount->Path(".aprfs/metrics"));
  PromParse metrics = ParsePrometheusText(text);
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems) << text;
  const std::map<std::string, std::string> label = {{"model", "big.apr"}};
  EXPECT_EQ(metrics.Value("aprfs_fetched_bytes_total", label), static_cast<double>(shard_bytes));
  EXPECT_EQ(metrics.Value("aprfs_model_cached_bytes", label), static_cast<double>(shard_bytes));
  EXPECT_EQ(metrics.Value("aprfs_http_requests_total", label),
            static_cast<double>(served.requests));
  EXPECT_EQ(metrics.Value("aprfs_fetches_in_flight", label), 0);
  EXPECT_EQ(metrics.Value("aprfs_cache_size_limit_bytes", {}), static_cast<double>(1ull << 30));
  EXPECT_EQ(Xattr(path, "user.aprfs.revision"), hub.Commit("org/big"));
  EXPECT_EQ(Xattr(path, "user.aprfs.source"), "hf://org/big");
  EXPECT_EQ(Xattr(path, "user.aprfs.cached_bytes"), std::to_string(shard_bytes));
  EXPECT_EQ(Xattr(mount->Path("org/big.apr"), "user.aprfs.bytes_fetched"),
            std::to_string(shard_bytes));

  ProcResult table = RunAprfs({"status", mount->mountpoint()}, {}, 30s);
  EXPECT_EQ(table.exit_code, 0) << table.Describe();
  EXPECT_NE(table.out.find("hf://org/big  " + hub.Commit("org/big").substr(0, 8) + "  ready"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("100%"), std::string::npos) << table.out;
}

// A download in progress shows as in flight; a failed attempt as a failed request; a read that
// fails as an error. The fault server stalls or refuses on command.
TEST_F(RemoteStatusTest, InFlightFailedRequestsAndErrorsAreCounted) {
  SetWatchdog(120s);
  const SourceModel& model = SingleModel();
  FaultServer& server = StartFault("fault", model.ShardPath("model.safetensors"),
                                   {"--path", "model.safetensors", "--stall-max", "20"});
  AprfsMount* mount =
      Mount("mnt",
            {"--repo", "fault/model", "--cache-dir", Dir("cache"), "--no-hf-cache",
             "--max-connections", "1"},
            Env(server.endpoint(), {"HF_HUB_DOWNLOAD_TIMEOUT=3", "HF_HUB_ETAG_TIMEOUT=3"}));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("model.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "") << mount->Log();
  ASSERT_TRUE(WaitFor([&] { return Quiet(*mount, "model.apr"); }, 30s));
  json before = ModelEntry(ReadStatus(*mount), "model.apr");
  EXPECT_EQ(U(before, "failed_requests"), 0u);
  const SourceTensor& weight = model.tensors.at("w.weight");
  // 7 MiB into chunk 1: far from where the index read left its stream (no read-ahead there).
  const uint64_t within = kChunk + (7 << 20) - weight.shard_offset;

  // The next data request stalls after its headers: while it hangs, one fetch is in flight.
  ASSERT_TRUE(server.Reset());
  ASSERT_TRUE(server.Plan(R"(["stall"])"));
  auto reader = std::async(std::launch::async, [&] {
    std::string got;
    int err = ReadRange(path, AprOffsetOf(layout, "w.weight", within), 4096, &got);
    return err == 0 && got == model.TensorBytes("w.weight").substr(within, 4096);
  });
  EXPECT_TRUE(WaitFor(
      [&] { return U(ModelEntry(ReadStatus(*mount), "model.apr"), "in_flight") == 1; }, 10s))
      << ReadStatus(*mount).dump(2);
  PromParse metrics = ParsePrometheusText(SlurpOrEmpty(mount->Path(".aprfs/metrics")));
  EXPECT_EQ(metrics.Value("aprfs_fetches_in_flight", {{"model", "model.apr"}}), 1);
  // The stall times out (3 s), the retry succeeds, the read gets its bytes.
  EXPECT_TRUE(reader.get()) << mount->Log();
  ASSERT_TRUE(WaitFor([&] { return Quiet(*mount, "model.apr"); }, 30s));
  json after = ModelEntry(ReadStatus(*mount), "model.apr");
  EXPECT_EQ(U(after, "failed_requests"), U(before, "failed_requests") + 1) << after.dump(2);
  EXPECT_EQ(U(after, "requests"), U(before, "requests") + 2);
  EXPECT_EQ(U(after, "bytes_fetched"), U(before, "bytes_fetched") + kChunk);
  EXPECT_EQ(U(after, "errors"), 0u);

  // A definite refusal (404): the read fails with EIO, counted once as an error.
  ASSERT_TRUE(server.Reset());
  ASSERT_TRUE(server.Plan(R"({"plan": [], "then": "status:404"})"));
  std::string got;
  const uint64_t within2 = 2 * kChunk + (1 << 20) - weight.shard_offset;
  EXPECT_EQ(ReadRange(path, AprOffsetOf(layout, "w.weight", within2), 4096, &got), EIO);
  json failed = ModelEntry(ReadStatus(*mount), "model.apr");
  EXPECT_EQ(U(failed, "errors"), 1u) << failed.dump(2);
  // At least the refused request; a slow (sanitized) daemon may also have had a read-ahead
  // request refused by then.
  EXPECT_GE(U(failed, "failed_requests"), U(after, "failed_requests") + 1);
  EXPECT_EQ(U(failed, "bytes_read"), U(after, "bytes_read")) << "a failed read served no bytes";
  EXPECT_EQ(Xattr(path, "user.aprfs.bytes_read"), std::to_string(U(after, "bytes_read")));
}

}  // namespace
}  // namespace aprfs_rtest
