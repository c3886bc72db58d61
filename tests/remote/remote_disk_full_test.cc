// The caches on a full disk (issue 5): the chunk cache (--cache-dir) or the HF cache on a small
// tmpfs of their own, with no --cache-size, so the disk fills before any limit would. Reads keep
// returning the exact bytes (older chunks are evicted to make room; when nothing can be, a chunk
// is served from memory to the readers waiting for it), the daemon never crashes, nothing partial
// is left in the HF cache, and status.json says what could not be stored.

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

namespace fs = std::filesystem;

class RemoteDiskFullTest : public RemoteTest {};

uint64_t TestSeed() {
  const char* text = std::getenv("APRFS_TEST_SEED");
  uint64_t seed = text ? std::strtoull(text, nullptr, 10) : std::random_device{}();
  std::fprintf(stderr, "[ note ] seed %llu (APRFS_TEST_SEED=%llu repeats it)\n",
               static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  return seed;
}

// `count` O_DIRECT reads of random ranges (up to 3 MiB, some across chunk boundaries) of the
// mounted file, each compared with the same bytes of `reference` (a verified whole read).
void ExpectRandomRangesExact(const std::string& path, const std::string& reference, int count) {
  std::mt19937_64 random(TestSeed());
  for (int i = 0; i < count; ++i) {
    const uint64_t length = 1 + random() % (3 << 20);
    const uint64_t offset = random() % (reference.size() - length);
    std::string got;
    double seconds = 0;
    int err = ReadRange(path, offset, length, &got, &seconds);
    ASSERT_EQ(err, 0) << "read of " << length << " bytes at " << offset << ": "
                      << (err > 0 ? std::strerror(err) : "short");
    ASSERT_TRUE(got == reference.substr(offset, length))
        << "wrong bytes in the read of " << length << " bytes at " << offset;
    EXPECT_LT(seconds, 20.0) << "the read of " << length << " bytes at " << offset;
  }
}

// A whole sequential read, checked byte for byte; the bytes (empty on failure).
std::string ReadWholeExact(const std::string& path, const SourceModel& model) {
  DropPageCache(path);
  SequentialRead read = ReadSequentially(path);
  EXPECT_EQ(read.error, 0) << "the whole read failed after " << read.bytes.size() << " bytes: "
                           << (read.error > 0 ? std::strerror(read.error) : "short");
  std::vector<std::string> problems = read.error == 0 ? CheckAprBytes(read.bytes, model)
                                                      : std::vector<std::string>{"read failed"};
  EXPECT_TRUE(problems.empty()) << Join(problems);
  return problems.empty() ? read.bytes : std::string();
}

// Every present chunk of every store of the cache holds the source's bytes.
void ExpectStoresRight(const std::string& cache, const HubFixture& hub, const std::string& repo,
                       const SourceModel& model) {
  for (const std::string& shard : model.shards) {
    const std::string store = StoreDir(cache, hub.Sha(repo, shard));
    if (!PathExists(store + "/map")) continue;
    std::vector<std::string> problems = CheckStoreAgainst(store, model.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << shard << ": " << Join(problems);
  }
}

// HF cache entries a reader would trip on: dangling symlinks and temporary (partial) files.
std::vector<std::string> BrokenHfCacheEntries(const std::string& hf) {
  std::vector<std::string> broken;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(hf, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string path = it->path().string();
    struct stat st;
    if (it->is_symlink(ec) && ::stat(path.c_str(), &st) != 0) broken.push_back(path + " dangles");
    if (path.find(".incomplete") != std::string::npos || path.find(".tmp") != std::string::npos) {
      broken.push_back(path + " is a leftover temporary file");
    }
  }
  return broken;
}

// The disk holds two of the model's nine chunks: reading it all stores chunk after chunk by
// evicting the oldest ones (the disk, not a limit, decides).
TEST_F(RemoteDiskFullTest, ChunkCacheOnAFullDiskEvictsForRoomAndServesExactBytes) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = SmallFilesystem("cache", 20 << 20);
  AprfsMount* mount = Mount("mnt", {"--repo", "org/big", "--cache-dir", cache, "--no-hf-cache"},
                            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  const std::string reference = ReadWholeExact(path, big);
  ASSERT_FALSE(reference.empty());
  // The disk filled (a write was refused) and the cache kept storing: more chunks than the disk
  // holds at once (two full ones and a bit) were stored, so older ones were evicted for them.
  EXPECT_NE(mount->LogText().find("No space left on device"), std::string::npos) << mount->Log();
  EXPECT_NE(mount->LogText().find("older chunks evicted"), std::string::npos) << mount->Log();
  json m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_GE(m.value("chunks_fetched", 0), 5) << m.dump(2);
  ASSERT_NO_FATAL_FAILURE(ExpectRandomRangesExact(path, reference, 12));
  EXPECT_TRUE(mount->Alive()) << mount->Log();
  EXPECT_LE(PresentBytesInCache(cache), 20u << 20);
  m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_EQ(m.value("errors", 1), 0) << m.dump(2);
  Unmount(mount);
  ExpectStoresRight(cache, hub, "org/big", big);
}

// The disk is full of other files: nothing can be evicted, every chunk is served from memory
// to its readers (and not stored); once there is room again, chunks are stored again.
TEST_F(RemoteDiskFullTest, CacheDiskFullOfOtherFilesServesReadsFromMemory) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = SmallFilesystem("cache", 12 << 20);  // one chunk, once emptied
  AprfsMount* mount = Mount("mnt", {"--repo", "org/big", "--cache-dir", cache, "--no-hf-cache"},
                            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  ASSERT_GT(FileSize(path), 0u);  // looked up: the chunk stores exist
  EXPECT_EQ(FillFilesystem(cache), 0u) << "the cache's disk is not full";

  const std::string reference = ReadWholeExact(path, big);
  ASSERT_FALSE(reference.empty());
  ASSERT_NO_FATAL_FAILURE(ExpectRandomRangesExact(path, reference, 12));
  EXPECT_TRUE(mount->Alive()) << mount->Log();
  EXPECT_EQ(PresentBytesInCache(cache), 0u) << "stored on a full disk?";

  // Said in the log (with the path) and in status.json.
  const std::string log = mount->LogText();
  EXPECT_NE(log.find("cannot write the chunk cache " + cache + "/chunks/"), std::string::npos)
      << mount->Log();
  EXPECT_NE(log.find("No space left on device"), std::string::npos);
  json m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_EQ(m.value("errors", 1), 0) << m.dump(2);
  EXPECT_GE(m.value("cache_errors", 0), 9) << "one per chunk read: " << m.dump(2);
  for (const json& shard : m["shards"]) {
    EXPECT_NE(shard.value("cache_error", "").find("No space left on device"), std::string::npos)
        << shard.dump();
  }
  const std::string metrics = SlurpOrEmpty(mount->Path(".aprfs/metrics"));
  EXPECT_NE(metrics.find("aprfs_cache_errors_total{model=\"big.apr\"} "), std::string::npos)
      << metrics;

  // Room again: chunks are stored again. A read-ahead download still running may take the
  // room first (and be the one stored), so readers of a few chunks wait for the first commit.
  ASSERT_EQ(::unlink((cache + "/filler").c_str()), 0);
  bool stored = false;
  for (int i = 0; i < 6 && !stored; ++i) {
    const uint64_t at = reference.size() * (2 * i + 1) / 12;
    std::string got;
    ASSERT_EQ(ReadRange(path, at, 4096, &got), 0);
    EXPECT_TRUE(got == reference.substr(at, 4096)) << "at " << at;
    stored = WaitFor([&] { return PresentBytesInCache(cache) > 0; }, 3s);
  }
  EXPECT_TRUE(stored) << "nothing stored once the disk had room again\n" << mount->Log();
  Unmount(mount);
  ExpectStoresRight(cache, hub, "org/big", big);
}

// Full before the first lookup: the metadata and the chunk maps cannot be written. A clear
// error (status.json names the path and ENOSPC), no crash; and once there is room again, the
// model mounts from that same cache (nothing half-written was left to stand for the metadata).
TEST_F(RemoteDiskFullTest, CacheDiskFullAtLookupIsAClearErrorAndHealsOnceFreed) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = SmallFilesystem("cache", 1 << 20);
  ASSERT_EQ(FillFilesystem(cache), 0u);
  const std::vector<std::string> args = {"--repo", "org/big", "--cache-dir", cache,
                                         "--no-hf-cache"};
  AprfsMount* mount = Mount("mnt", args, Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  struct stat st;
  EXPECT_NE(::stat(mount->Path("big.apr").c_str(), &st), 0) << "shown without a chunk cache";
  json m = ModelEntry(ReadStatus(*mount), "big.apr");
  EXPECT_EQ(m.value("state", ""), "error") << m.dump(2);
  const std::string error = m.value("error", "");
  EXPECT_NE(error.find(cache + "/chunks/"), std::string::npos) << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_TRUE(mount->Alive()) << mount->Log();
  Unmount(mount);

  ASSERT_EQ(::unlink((cache + "/filler").c_str()), 0);
  AprfsMount* again = Mount("mnt2", args, Env(hub.endpoint()));
  ASSERT_NE(again, nullptr);
  ReadWholeExact(again->Path("big.apr"), big);
}

// A shard of 521 chunks has a chunk map of two pages: the last-access words of chunks 487 and
// up are on the second. With exactly one chunk of room left, storing chunk 500 takes the last
// page; the map's words are written through a shared mapping, so a page of it that was never
// allocated would now be a SIGBUS. The map is allocated when the store is created.
TEST_F(RemoteDiskFullTest, FullDiskNeverCrashesTheDaemonThroughTheChunkMap) {
  constexpr uint64_t kChunks = 521;
  constexpr uint64_t kWeight = kChunks * kChunk - (1 << 20);
  const std::string dir = Dir("sparse");
  const std::string shard = dir + "/model.safetensors";
  std::string header = R"({"w":{"dtype":"U8","shape":[)" + std::to_string(kWeight) +
                       R"(],"data_offsets":[0,)" + std::to_string(kWeight) + "]}}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  const uint64_t data_start = 8 + header.size();
  // Holes (zeros) but for 1 MiB of random bytes at the places read.
  std::mt19937_64 random(TestSeed());
  std::vector<uint64_t> reads;  // offsets within w
  {
    Fd fd(shard, O_WRONLY | O_CREAT | O_TRUNC);
    ASSERT_TRUE(fd.ok());
    uint64_t length = header.size();
    ASSERT_EQ(::pwrite(fd.get(), &length, 8, 0), 8);
    ASSERT_EQ(::pwrite(fd.get(), header.data(), header.size(), 8),
              static_cast<ssize_t>(header.size()));
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(data_start + kWeight)), 0);
    for (uint64_t chunk : {500, 501, 502}) {
      std::string bytes(1 << 20, '\0');
      for (char& c : bytes) c = static_cast<char>(random());
      const uint64_t at = chunk * kChunk + (2 << 20);
      ASSERT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(at)),
                static_cast<ssize_t>(bytes.size()));
      reads.push_back(at + 4096 - data_start);
    }
  }
  // The fixture would hash 4 GiB of zeros: give it the file's hash up front (its --hash-cache).
  // The stand-in is advertised consistently (API, ETag), and a shard never completed here is
  // never verified against it.
  struct stat st;
  ASSERT_EQ(::stat(shard.c_str(), &st), 0);
  const std::string hashes = root() + "/hashes.json";
  WriteText(hashes, json{{fs::canonical(shard).string(),
                          {{"size", st.st_size},
                           {"mtime_ns", st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec},
                           {"sha256", std::string(64, 'a')},
                           {"git_sha1", nullptr}}}}
                        .dump());
  HubFixture& hub = StartHub("hub", {"--repo", "org/sparse=" + dir, "--hash-cache", hashes});
  const std::string cache = SmallFilesystem("cache", 16 << 20);
  AprfsMount* mount = Mount("mnt",
                            {"--repo", "org/sparse", "--cache-dir", cache, "--no-hf-cache",
                             "--max-connections", "1"},
                            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("sparse.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "") << mount->Log();
  Fd source(shard, O_RDONLY);
  auto expect_read = [&](uint64_t within) {
    std::string want(64 << 10, '\0'), got;
    ASSERT_EQ(::pread(source.get(), want.data(), want.size(),
                      static_cast<off_t>(data_start + within)),
              static_cast<ssize_t>(want.size()));
    int err = ReadRange(path, AprOffsetOf(layout, "w", within), want.size(), &got);
    ASSERT_EQ(err, 0) << "read at " << within << " of w: "
                      << (err > 0 ? std::strerror(err) : "short") << "\n"
                      << mount->Log();
    EXPECT_TRUE(got == want) << "wrong bytes at " << within << " of w";
  };
  ASSERT_EQ(FillFilesystem(cache, kChunk), kChunk) << "not exactly one chunk of room";
  ASSERT_NO_FATAL_FAILURE(expect_read(reads[0]));  // takes the last page
  // (Served from memory: stored meanwhile.)
  EXPECT_TRUE(WaitFor(
      [&] { return ReadChunkMap(StoreDir(cache, std::string(64, 'a'))).PresentCount() == 1; }, 20s))
      << mount->Log();
  ASSERT_NO_FATAL_FAILURE(expect_read(reads[1]));  // the disk is full: evicts chunk 500
  ASSERT_NO_FATAL_FAILURE(expect_read(reads[2]));
  ASSERT_NO_FATAL_FAILURE(expect_read(reads[0]));
  EXPECT_TRUE(mount->Alive()) << mount->Log();
}

// The HF cache on a full disk: publishing a complete shard fails part way through the copy
// (ENOSPC). Nothing partial is left there, the chunk store keeps the shard (reads stay exact),
// status.json says why; once there is room, the next mount publishes it without a download.
TEST_F(RemoteDiskFullTest, HfCacheOnAFullDiskIsLeftCleanAndPublishedLater) {
  const SourceModel& tiny = TinyModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/tiny=" + tiny.dir});
  const std::string cache = Dir("cache");
  const std::string hf = SmallFilesystem("hf", 1 << 20);
  // Less room than one shard (~90 KB): the copy starts, then fails.
  ASSERT_LT(FillFilesystem(hf, 48 << 10), tiny.ShardSize(tiny.shards[0]));
  const std::vector<std::string> args = {"--repo", "org/tiny", "--cache-dir", cache,
                                         "--hf-cache", hf};
  AprfsMount* mount = Mount("mnt", args, Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("tiny.apr");
  ReadWholeExact(path, tiny);
  auto failures = [&] {
    const std::string log = mount->LogText();
    size_t n = 0;
    for (size_t at = 0; (at = log.find("not published to the HF cache", at)) != std::string::npos;
         ++at) {
      ++n;
    }
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return failures() >= tiny.shards.size(); }, 20s))
      << "the publications did not fail\n"
      << mount->Log();
  const std::string log = mount->LogText();
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << mount->Log();
  EXPECT_NE(log.find(hf + "/" + RepoFolder("org/tiny") + "/blobs/"), std::string::npos)
      << "the failure does not name the path\n"
      << mount->Log();

  // Nothing partial or dangling in the HF cache.
  EXPECT_TRUE(ListDir(hf + "/" + RepoFolder("org/tiny") + "/blobs").empty());
  std::vector<std::string> broken = BrokenHfCacheEntries(hf);
  EXPECT_TRUE(broken.empty()) << Join(broken);
  EXPECT_FALSE(PathExists(hf + "/" + RepoFolder("org/tiny") + "/snapshots/" +
                          hub.Commit("org/tiny") + "/" + tiny.shards[0]));

  // Status: not published, and why.
  json m = ModelEntry(ReadStatus(*mount), "tiny.apr");
  EXPECT_EQ(m.value("cache_errors", 0), static_cast<int>(tiny.shards.size())) << m.dump(2);
  for (const json& shard : m["shards"]) {
    EXPECT_EQ(shard.value("published", true), false) << shard.dump();
    EXPECT_NE(shard.value("cache_error", "").find("No space left on device"), std::string::npos)
        << shard.dump();
  }
  // The chunk stores keep the complete shards, and the file still reads right.
  for (const std::string& shard : tiny.shards) {
    ChunkMap map = ReadChunkMap(StoreDir(cache, hub.Sha("org/tiny", shard)));
    ASSERT_EQ(map.error, "") << shard;
    EXPECT_EQ(map.PresentCount(), map.present.size()) << shard;
  }
  ReadWholeExact(path, tiny);
  Unmount(mount);
  ExpectStoresRight(cache, hub, "org/tiny", tiny);

  // Room again: the next mount publishes what the first one could not, downloading nothing.
  ASSERT_EQ(::unlink((hf + "/filler").c_str()), 0);
  const size_t downloads = DataRequestCount(hub.CdnLog());
  AprfsMount* again = Mount("mnt2", args, Env(hub.endpoint()));
  ASSERT_NE(again, nullptr);
  ASSERT_GT(FileSize(again->Path("tiny.apr")), 0u);
  bool published = WaitUntilEveryShardPublished(hf, hub, "org/tiny", tiny, 20s);
  EXPECT_TRUE(published) << again->Log();
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), downloads) << Describe(hub.CdnLog());
}

}  // namespace
}  // namespace aprfs_rtest
