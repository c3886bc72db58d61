// Remote models through the mount (issue 3, "Done when" 1 and 2): a --repo model mounts from the
// shards' headers alone and serves correct bytes; a second mount reuses every byte already
// fetched and works offline for cached ranges; complete shards are published into the HF cache
// in the official layout and read locally afterwards; a repo partly present in the HF cache
// fetches only the missing shards. The Hub is tests/tools/hub_fixture.py (two real nginx).

#include <cerrno>
#include <cstring>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

class RemoteMountTest : public RemoteTest {};

// Reads the whole mounted file and checks every byte against the source model.
void ExpectWholeFileCorrect(const std::string& path, const SourceModel& model) {
  SCOPED_TRACE("reading " + path);
  DropPageCache(path);
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(path, &bytes, &error)) << error;
  ASSERT_EQ(bytes.size(), FileSize(path));
  std::vector<std::string> problems = CheckAprBytes(bytes, model);
  EXPECT_TRUE(problems.empty()) << Join(problems);
}

TEST_F(RemoteMountTest, MountsFromHeadersAloneAndServesCorrectBytes) {
  const SourceModel& big = BigModel();
  const SourceModel& tiny = TinyModel();
  HubFixture& hub =
      StartHub("hub", {"--repo", "org/big=" + big.dir, "--repo", "org/tiny=" + tiny.dir});
  AprfsMount* mount = Mount(
      "mnt",
      {"--repo", "org/big", "--repo", "org/tiny", "--cache-dir", Dir("cache"), "--no-hf-cache"},
      Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), 0u) << "the CDN was asked for data before any lookup:\n"
                                                << Describe(hub.CdnLog());

  // Listed under the short name and under the org, with a size, from the headers alone; big
  // holds U8 tensors, which no quantized import converts: no q4k view.
  EXPECT_EQ(ListDir(mount->mountpoint()),
            (std::vector<std::string>{"big.apr", "org", "tiny.apr", "tiny.q4k.apr"}));
  EXPECT_EQ(ListDir(mount->Path("org")),
            (std::vector<std::string>{"big.apr", "tiny.apr", "tiny.q4k.apr"}));
  const uint64_t big_size = FileSize(mount->Path("big.apr"));
  const uint64_t tiny_size = FileSize(mount->Path("tiny.apr"));
  EXPECT_EQ(FileSize(mount->Path("org/big.apr")), big_size);
  EXPECT_GT(big_size, 59000000u);
  EXPECT_GT(tiny_size, 180000u);

  std::vector<AccessLine> log = hub.CdnLog();
  for (const auto* model : {&big, &tiny}) {
    const std::string repo = model == &big ? "org/big" : "org/tiny";
    for (const std::string& shard : model->shards) {
      std::vector<AccessLine> lines = LinesFor(log, hub.Sha(repo, shard));
      uint64_t size = model->ShardSize(shard);
      ASSERT_EQ(lines.size(), 1u) << repo << "/" << shard << ": expected one header request, got:\n"
                                  << Describe(lines);
      EXPECT_TRUE(IsHeaderRange(lines[0], size)) << "not a header range: " << lines[0].raw;
      EXPECT_EQ(lines[0].status, 206) << lines[0].raw;
      EXPECT_LE(lines[0].bytes, kHeaderRead);
    }
  }
  EXPECT_EQ(DataRequestCount(log), big.shards.size() + tiny.shards.size())
      << "requests for anything but the shards' headers after the mount:\n"
      << Describe(log);

  // The bytes: our own byte-for-byte check, then the independent checker.
  ExpectWholeFileCorrect(mount->Path("big.apr"), big);
  EXPECT_EQ(FileSize(mount->Path("big.apr")), big_size) << "the size changed once the data came";
  ProcResult check = RunAprcheck(mount->Path("big.apr"), big.dir);
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  ProcResult check_tiny = RunAprcheck(mount->Path("org/tiny.apr"), tiny.dir, {"--mmap"});
  EXPECT_EQ(check_tiny.exit_code, 0) << check_tiny.Describe();
  EXPECT_EQ(FileSize(mount->Path("tiny.apr")), tiny_size);
}

TEST_F(RemoteMountTest, SecondMountReusesEveryByteAndWorksOffline) {
  SetWatchdog(150s);
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  const std::vector<std::string> args = {"--repo", "org/big", "--cache-dir", cache,
                                         "--no-hf-cache"};

  // 1. A full read fills the chunk store.
  AprfsMount* first = Mount("mnt1", args, Env(hub.endpoint()));
  ASSERT_NE(first, nullptr);
  ExpectWholeFileCorrect(first->Path("big.apr"), big);
  Unmount(first);
  const std::vector<AccessLine> after_first = hub.CdnLog();
  for (const std::string& shard : big.shards) {
    const std::string sha = hub.Sha("org/big", shard);
    ChunkMap map = ReadChunkMap(StoreDir(cache, sha));
    ASSERT_EQ(map.error, "") << shard;
    EXPECT_EQ(map.PresentCount(), ChunkCount(big.ShardSize(shard)))
        << shard << ": not every chunk kept";
    std::vector<std::string> problems =
        CheckStoreAgainst(StoreDir(cache, sha), big.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << Join(problems);
  }

  // 2. A second mount on the same cache: not one request to the CDN.
  AprfsMount* second = Mount("mnt2", args, Env(hub.endpoint()));
  ASSERT_NE(second, nullptr);
  ExpectWholeFileCorrect(second->Path("big.apr"), big);
  Unmount(second);
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), DataRequestCount(after_first))
      << "the second mount fetched again:\n"
      << Describe(hub.CdnLog());

  // 3. Another cache that holds only the chunk of blk.0.norm (a small O_DIRECT read: no prefetch).
  const std::string partial = Dir("cache-partial");
  const std::vector<std::string> partial_args = {"--repo", "org/big", "--cache-dir", partial,
                                                 "--no-hf-cache"};
  AprLayout layout;
  {
    AprfsMount* mount = Mount("mnt3", partial_args, Env(hub.endpoint()));
    ASSERT_NE(mount, nullptr);
    layout = ParseAprFile(mount->Path("big.apr"));
    ASSERT_EQ(layout.error, "");
    std::string got;
    ASSERT_EQ(ReadRange(mount->Path("big.apr"), AprOffsetOf(layout, "blk.0.norm"), 4004, &got), 0);
    EXPECT_EQ(got, big.TensorBytes("blk.0.norm"));
    Unmount(mount);
  }
  ChunkMap partial_map = ReadChunkMap(StoreDir(partial, hub.Sha("org/big", big.shards[0])));
  EXPECT_EQ(partial_map.PresentCount(), 1u) << "the test expects only chunk 0 of shard 1 cached";

  // 4. The hub is gone.
  hub.Stop();
  const std::string dead_endpoint = hub.endpoint();
  struct Case {
    std::string name;
    std::vector<std::string> env;
  };
  const std::vector<Case> cases = {
      {"HF_HUB_OFFLINE=1", Env(dead_endpoint, {"HF_HUB_OFFLINE=1", "HF_HUB_DOWNLOAD_TIMEOUT=2"})},
      {"dead endpoint", Env(dead_endpoint, {"HF_HUB_DOWNLOAD_TIMEOUT=2", "HF_HUB_ETAG_TIMEOUT=2"})},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // The full cache: the whole file, from the metadata cache and the chunk store.
    if (c.name == "HF_HUB_OFFLINE=1") {
      AprfsMount* mount = Mount("offline-full-" + std::to_string(n), args, c.env);
      ASSERT_NE(mount, nullptr);
      ExpectWholeFileCorrect(mount->Path("big.apr"), big);
      Unmount(mount);
    }
    AprfsMount* mount = Mount("offline-partial-" + std::to_string(n++), partial_args, c.env);
    ASSERT_NE(mount, nullptr);
    auto t0 = Clock::now();
    EXPECT_EQ(FileSize(mount->Path("big.apr")), layout.file_size) << mount->Log();
    double lookup = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(lookup, 30.0) << "the lookup took " << lookup << " s before using the metadata cache";
    std::string got;
    double seconds = 0;
    EXPECT_EQ(
        ReadRange(mount->Path("big.apr"), AprOffsetOf(layout, "blk.0.norm"), 4004, &got, &seconds),
        0)
        << "a cached range failed offline";
    EXPECT_EQ(got, big.TensorBytes("blk.0.norm"));
    // An uncached range: EIO, within the read deadline (never a hang, never other bytes).
    int err = ReadRange(mount->Path("big.apr"), AprOffsetOf(layout, "blk.2.weight", 5 << 20), 4096,
                        &got, &seconds);
    EXPECT_EQ(err, EIO) << "uncached range offline: " << (err > 0 ? std::strerror(err) : "read ok");
    EXPECT_LT(seconds, 30.0) << "the failing read took " << seconds << " s";
    std::fprintf(stderr, "[ note ] %s: lookup %.1f s, failing read %.1f s\n", c.name.c_str(),
                 lookup, seconds);
    Unmount(mount);
  }
  // Nothing wrong was stored meanwhile.
  std::vector<std::string> problems = CheckStoreAgainst(
      StoreDir(partial, hub.Sha("org/big", big.shards[0])), big.ShardPath(big.shards[0]));
  EXPECT_TRUE(problems.empty()) << Join(problems);
}

// The chunk store is shared by mounts whatever HF cache they publish to: a range read by a
// first mount (shard not complete, so not published) is not fetched again by a second mount
// that uses a fresh, empty HF cache.
TEST_F(RemoteMountTest, PartlyReadShardIsReusedWithAFreshHfCache) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache");
  // Two small reads 14 MiB apart (not one sequential stream, so no read-ahead): chunks 0 and
  // 1 of the second shard, which stays incomplete.
  const std::string weight = big.TensorBytes("blk.1.weight");
  const uint64_t reads[2] = {1 << 20, 15 << 20};
  size_t requests = 0;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("mount " + std::to_string(round + 1));
    const std::string hf = Dir("hf" + std::to_string(round));
    AprfsMount* mount =
        Mount("mnt" + std::to_string(round),
              {"--repo", "org/big", "--cache-dir", cache, "--hf-cache", hf}, Env(hub.endpoint()));
    ASSERT_NE(mount, nullptr);
    AprLayout layout = ParseAprFile(mount->Path("big.apr"));
    ASSERT_EQ(layout.error, "");
    for (uint64_t within : reads) {
      std::string got;
      ASSERT_EQ(ReadRange(mount->Path("big.apr"), AprOffsetOf(layout, "blk.1.weight", within), 4096,
                          &got),
                0);
      EXPECT_TRUE(got == weight.substr(within, 4096)) << "wrong bytes at " << within;
    }
    Unmount(mount);
    EXPECT_TRUE(ListDir(hf + "/" + RepoFolder("org/big") + "/blobs").empty())
        << "nothing is complete yet";
    if (round == 0) {
      requests = DataRequestCount(hub.CdnLog());
      EXPECT_EQ(ChunkDownloads(hub.CdnLog(), hub.Sha("org/big", big.shards[1]),
                               big.ShardSize(big.shards[1]))
                    .size(),
                2u)
          << Describe(hub.CdnLog());
    }
  }
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), requests) << "fetched again:\n"
                                                      << Describe(hub.CdnLog());
}

// A daemon killed in the middle of downloads: the chunks it had completed are kept (and right),
// the ones it was writing are not marked present, and the next daemon resumes from there.
TEST_F(RemoteMountTest, KilledDaemonsDownloadsResumeAfterRestart) {
  const SourceModel& big = BigModel();
  // 4 MiB/s per connection: a chunk takes about a second, so the kill lands mid-download.
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir, "--rate-limit", "4194304"});
  const std::string cache = Dir("cache");
  const std::vector<std::string> args = {"--repo", "org/big", "--cache-dir", cache,
                                         "--no-hf-cache"};
  AprfsMount* first = Mount("mnt1", args, Env(hub.endpoint()));
  ASSERT_NE(first, nullptr);
  ASSERT_GT(FileSize(first->Path("big.apr")), 0u);
  SequentialRead interrupted;
  std::thread reader([&] { interrupted = ReadSequentially(first->Path("big.apr")); });
  bool some = WaitFor([&] { return PresentBytesInCache(cache) >= kChunk; }, 20s);
  first->Kill();
  reader.join();
  ASSERT_TRUE(some) << "no chunk arrived within 20 s";
  EXPECT_NE(interrupted.error, 0) << "the read finished before the kill: the test proves nothing";
  Unmount(first);

  std::map<std::string, std::vector<bool>> before;
  uint64_t kept = 0, total = 0;
  for (const std::string& shard : big.shards) {
    const std::string store = StoreDir(cache, hub.Sha("org/big", shard));
    ChunkMap map = ReadChunkMap(store);
    ASSERT_EQ(map.error, "") << shard;
    before[shard] = map.present;
    kept += map.PresentCount();
    total += map.present.size();
    std::vector<std::string> problems = CheckStoreAgainst(store, big.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << "after the kill: " << Join(problems);
  }
  std::fprintf(stderr, "[ note ] %llu of %llu chunks complete at the kill\n",
               static_cast<unsigned long long>(kept), static_cast<unsigned long long>(total));
  EXPECT_LT(kept, total) << "everything had arrived: the kill interrupted nothing";

  const size_t log_before = hub.CdnLog().size();
  AprfsMount* second = Mount("mnt2", args, Env(hub.endpoint()));
  ASSERT_NE(second, nullptr);
  ExpectWholeFileCorrect(second->Path("big.apr"), big);
  std::vector<AccessLine> log = hub.CdnLog();
  std::vector<AccessLine> after(log.begin() + static_cast<long>(std::min(log_before, log.size())),
                                log.end());
  for (const std::string& shard : big.shards) {
    std::map<uint64_t, int> downloads =
        ChunkDownloads(after, hub.Sha("org/big", shard), big.ShardSize(shard));
    for (size_t chunk = 0; chunk < before[shard].size(); ++chunk) {
      int want = before[shard][chunk] ? 0 : 1;
      EXPECT_EQ(downloads[chunk], want)
          << shard << " chunk " << chunk
          << (want ? ": missing chunk not fetched exactly once" : ": kept chunk fetched again");
    }
  }
}

TEST_F(RemoteMountTest, CompleteShardsArePublishedToTheHfCacheAndReadLocally) {
  const SourceModel& big = BigModel();
  const SourceModel& tiny = TinyModel();
  HubFixture& hub =
      StartHub("hub", {"--repo", "org/big=" + big.dir, "--repo", "org/tiny=" + tiny.dir});
  const std::string hf = Dir("hf");
  const std::string cache = Dir("cache");
  AprfsMount* mount = Mount(
      "mnt", {"--repo", "org/big", "--repo", "org/tiny", "--cache-dir", cache, "--hf-cache", hf},
      Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  ExpectWholeFileCorrect(mount->Path("big.apr"), big);
  ExpectWholeFileCorrect(mount->Path("tiny.apr"), tiny);

  struct Published {
    std::string repo, shard, sha, source;
  };
  std::vector<Published> all;
  for (const auto* model : {&big, &tiny}) {
    const std::string repo = model == &big ? "org/big" : "org/tiny";
    for (const std::string& shard : model->shards) {
      all.push_back({repo, shard, hub.Sha(repo, shard), model->ShardPath(shard)});
    }
  }
  // Verification and publication run in the background: wait for them (with a deadline).
  bool done = WaitFor(
      [&] {
        for (const Published& p : all) {
          if (!CheckPublished(hf, p.repo, hub.Commit(p.repo), "main", p.shard, p.sha, p.source)
                   .empty() ||
              PathExists(StoreDir(cache, p.sha))) {
            return false;
          }
        }
        return true;
      },
      30s);
  EXPECT_TRUE(done) << "not every shard was published within 30 s";
  for (const Published& p : all) {
    std::vector<std::string> problems =
        CheckPublished(hf, p.repo, hub.Commit(p.repo), "main", p.shard, p.sha, p.source);
    EXPECT_TRUE(problems.empty()) << p.repo << "/" << p.shard << ":\n" << Join(problems);
    EXPECT_FALSE(PathExists(StoreDir(cache, p.sha)))
        << "the chunk store of " << p.shard << " is still there";
  }
  // The mount still serves the file (now from the published blobs).
  ExpectWholeFileCorrect(mount->Path("big.apr"), big);
  Unmount(mount);

  // A new mount (fresh chunk cache) reads everything from the HF cache: no CDN request at all.
  const size_t before = DataRequestCount(hub.CdnLog());
  AprfsMount* again = Mount(
      "mnt2",
      {"--repo", "org/big", "--repo", "org/tiny", "--cache-dir", Dir("cache2"), "--hf-cache", hf},
      Env(hub.endpoint()));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(ListDir(again->mountpoint()),
            (std::vector<std::string>{"big.apr", "org", "tiny.apr", "tiny.q4k.apr"}))
      << "a --repo that is also in the HF cache must be one model";
  ExpectWholeFileCorrect(again->Path("big.apr"), big);
  ExpectWholeFileCorrect(again->Path("org/tiny.apr"), tiny);
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), before) << "the CDN was asked again:\n"
                                                    << Describe(hub.CdnLog());
  EXPECT_FALSE(PathExists(Dir("cache2") + "/chunks/" + hub.Sha("org/big", big.shards[0])));
}

TEST_F(RemoteMountTest, ShardsAlreadyInTheHfCacheAreNotFetched) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string hf = Dir("hf");
  const std::string commit = hub.Commit("org/big");
  // huggingface_hub downloaded the first shard earlier.
  SeedHfCache(hf, "org/big", commit, big, {big.shards[0]});
  const std::string local_sha = hub.Sha("org/big", big.shards[0]);

  AprfsMount* mount =
      Mount("mnt", {"--repo", "org/big", "--cache-dir", Dir("cache"), "--hf-cache", hf},
            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ListDir(mount->mountpoint()), (std::vector<std::string>{"big.apr", "org"}))
      << "a --repo that is also in the HF cache must be one model";
  EXPECT_EQ(ListDir(mount->Path("org")), (std::vector<std::string>{"big.apr"}));
  ExpectWholeFileCorrect(mount->Path("big.apr"), big);
  ProcResult check = RunAprcheck(mount->Path("big.apr"), big.dir);
  EXPECT_EQ(check.exit_code, 0) << check.Describe();

  std::vector<AccessLine> log = hub.CdnLog();
  EXPECT_TRUE(LinesFor(log, local_sha).empty())
      << "the shard present in the HF cache was requested:\n"
      << Describe(LinesFor(log, local_sha));
  for (size_t i = 1; i < big.shards.size(); ++i) {
    const std::string sha = hub.Sha("org/big", big.shards[i]);
    std::map<uint64_t, int> chunks = ChunkDownloads(log, sha, big.ShardSize(big.shards[i]));
    EXPECT_EQ(chunks.size(), ChunkCount(big.ShardSize(big.shards[i])))
        << big.shards[i] << " was not fetched chunk by chunk:\n"
        << Describe(LinesFor(log, sha));
  }
  // The missing shards join the local one in the HF cache.
  bool published = WaitFor(
      [&] {
        for (size_t i = 1; i < big.shards.size(); ++i) {
          if (!CheckPublished(hf, "org/big", commit, "main", big.shards[i],
                              hub.Sha("org/big", big.shards[i]), big.ShardPath(big.shards[i]))
                   .empty()) {
            return false;
          }
        }
        return true;
      },
      30s);
  EXPECT_TRUE(published) << "the fetched shards were not published next to the local one";
  std::vector<std::string> problems = CheckPublished(hf, "org/big", commit, "main", big.shards[0],
                                                     local_sha, big.ShardPath(big.shards[0]));
  EXPECT_TRUE(problems.empty()) << "the local shard was disturbed:\n" << Join(problems);
}

// Shards completed by a mount that could not publish them (here --no-hf-cache; likewise a
// daemon stopped while verifying) are verified and published by the next mount that can,
// without a single new download.
TEST_F(RemoteMountTest, CompleteUnpublishedShardsArePublishedByTheNextMount) {
  const SourceModel& tiny = TinyModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/tiny=" + tiny.dir});
  const std::string cache = Dir("cache");
  AprfsMount* first = Mount("mnt", {"--repo", "org/tiny", "--cache-dir", cache, "--no-hf-cache"},
                            Env(hub.endpoint()));
  ASSERT_NE(first, nullptr);
  ExpectWholeFileCorrect(first->Path("tiny.apr"), tiny);
  Unmount(first);
  const size_t downloads = DataRequestCount(hub.CdnLog());

  const std::string hf = Dir("hf");
  AprfsMount* second = Mount("mnt2", {"--repo", "org/tiny", "--cache-dir", cache, "--hf-cache", hf},
                             Env(hub.endpoint()));
  ASSERT_NE(second, nullptr);
  // The plan (and with it the check of the chunk stores) is made on the first lookup.
  ExpectWholeFileCorrect(second->Path("tiny.apr"), tiny);
  bool published = WaitUntilEveryShardPublished(hf, hub, "org/tiny", tiny, 30s);
  EXPECT_TRUE(published) << "the complete chunk stores were not published by the second mount";
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), downloads) << Describe(hub.CdnLog());
}

}  // namespace
}  // namespace aprfs_rtest
