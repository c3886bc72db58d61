// The folder of every chunk store and its size limit (fetch/chunk_cache.h): the janitor's
// least-recently-used eviction down to 90 % of the limit, which never touches a published
// store or a claimed chunk; no limit means no eviction; and ParseSize.
#include "fetch/chunk_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using testing::PseudoRandomBytes;
using testing::TempDir;

constexpr uint32_t kChunk = 4096;
constexpr uint64_t kMapHeader = 64;

bool FillAll(ChunkStore& store, uint64_t seed) {
  std::string content = PseudoRandomBytes(store.size(), seed);
  for (uint64_t chunk = 0; chunk < store.chunk_count(); ++chunk) {
    auto claim = store.TryClaim(chunk);
    if (!claim) return false;
    uint64_t begin = store.ChunkBegin(chunk);
    if (store.Write(*claim, begin, std::string_view(content).substr(begin, store.ChunkLength(chunk))) != 0 ||
        store.Commit(*claim) != 0) {
      return false;
    }
  }
  return true;
}

// Sets a chunk's last-access time (seconds) in the map, so LRU order does not depend on
// sleeping across second boundaries. The map holds, after its 64-byte header, one 32-bit word
// per chunk and then one 32-bit access time per chunk; LastAccess() confirms the layout.
::testing::AssertionResult SetAccess(const ChunkStore& store, uint64_t chunk, uint32_t seconds) {
  int fd = ::open((store.dir() + "/map").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ::testing::AssertionFailure() << "cannot open the map";
  off_t at = static_cast<off_t>(kMapHeader + 4 * store.chunk_count() + 4 * chunk);
  bool ok = ::pwrite(fd, &seconds, 4, at) == 4;
  ::close(fd);
  if (!ok) return ::testing::AssertionFailure() << "cannot write the map";
  if (store.LastAccess(chunk) != seconds) {
    return ::testing::AssertionFailure()
           << "the map layout changed: LastAccess(" << chunk << ") = " << store.LastAccess(chunk);
  }
  return ::testing::AssertionSuccess();
}

std::set<uint64_t> PresentChunks(const ChunkStore& store) {
  std::set<uint64_t> present;
  for (uint64_t chunk = 0; chunk < store.chunk_count(); ++chunk) {
    if (store.Present(chunk)) present.insert(chunk);
  }
  return present;
}

class ChunkCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
    fs::create_directories(root());
  }
  void TearDown() override { spdlog::set_level(log_level_); }

  std::string root() const { return temp_ / "chunks"; }
  std::shared_ptr<ChunkStore> NewStore(const std::string& etag, uint64_t chunks) {
    return ChunkStore::Open(root() + "/" + etag, chunks * kChunk, kChunk);
  }

  // Waits until `done` holds (the janitor works in the background).
  template <typename Predicate>
  bool WaitFor(Predicate done, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  TempDir temp_;
  spdlog::level::level_enum log_level_;
};

TEST_F(ChunkCacheTest, EvictsLeastRecentlyUsedChunksDownToNinetyPercent) {
  // A: published, oldest of all; B and C interleaved in LRU order (B0 < C0 < B1 < C1 ...),
  // and B0, the oldest unpublished chunk, is claimed (being downloaded).
  auto a = NewStore("etagA", 10);
  auto b = NewStore("etagB", 10);
  auto c = NewStore("etagC", 10);
  ASSERT_TRUE(FillAll(*a, 1));
  ASSERT_TRUE(FillAll(*b, 2));
  ASSERT_TRUE(FillAll(*c, 3));
  auto publication = a->ClaimPublication();
  ASSERT_TRUE(publication);
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(SetAccess(*a, i, 500 + i));
    ASSERT_TRUE(SetAccess(*b, i, 1000 + 2 * i));
    ASSERT_TRUE(SetAccess(*c, i, 1001 + 2 * i));
  }
  auto claim = b->TryClaim(0);
  ASSERT_TRUE(claim);
  // Junk next to the stores is ignored.
  fs::create_directories(root() + "/junk");
  testing::WriteFile(root() + "/junk/map", "not a map");
  testing::WriteFile(root() + "/stray-file", "x");

  // 30 chunks present, limit 20, target 18 (90 %): 12 evictions, oldest first, skipping A
  // (published) and B0 (claimed): C0 B1 C1 B2 C2 B3 C3 B4 C4 B5 C5 B6.
  const uint64_t limit = 20 * kChunk;
  ChunkCache cache(root(), limit);  // its janitor makes a pass at once
  ASSERT_TRUE(WaitFor([&] { return b->PresentCount() + c->PresentCount() <= 8; }))
      << "the janitor did not evict: B " << b->PresentCount() << " C " << c->PresentCount();
  EXPECT_EQ(PresentChunks(*a).size(), 10u) << "a published store lost chunks";
  EXPECT_EQ(PresentChunks(*b), (std::set<uint64_t>{0, 7, 8, 9}));
  EXPECT_EQ(PresentChunks(*c), (std::set<uint64_t>{6, 7, 8, 9}));
  EXPECT_TRUE(a->Published());
  EXPECT_TRUE(fs::exists(root() + "/stray-file"));

  // Under the limit: a pass evicts nothing and reports the bytes present (published included).
  EXPECT_EQ(cache.EnforceLimit(), 18u * kChunk);
  EXPECT_EQ(b->PresentCount() + c->PresentCount(), 8u);

  // Reserving room for a 4-chunk download (18 + 4 > 20) evicts at once, down to 90 % of the
  // limit minus the download: the 4 oldest evictable chunks C6 (1013), B7 (1014), C7 (1015),
  // B8 (1016) go; B0 is still claimed.
  cache.Reserve(4 * kChunk);
  EXPECT_EQ(b->PresentCount() + c->PresentCount(), 4u) << "Reserve did not evict";
  auto d = NewStore("etagD", 4);
  ASSERT_TRUE(FillAll(*d, 4));  // accessed now: the newest
  cache.Release(4 * kChunk, /*stored=*/true);
  // The cache counts what it reserved: another chunk fits without a pass (18 + 1 <= 20).
  cache.Reserve(kChunk);
  EXPECT_EQ(b->PresentCount() + c->PresentCount(), 4u);
  cache.Release(kChunk, /*stored=*/false);
  EXPECT_EQ(PresentChunks(*b), (std::set<uint64_t>{0, 9}));
  EXPECT_EQ(PresentChunks(*c), (std::set<uint64_t>{8, 9}));
  EXPECT_EQ(PresentChunks(*d).size(), 4u);
  EXPECT_EQ(PresentChunks(*a).size(), 10u);
  EXPECT_EQ(cache.EnforceLimit(), 18u * kChunk);
}

TEST_F(ChunkCacheTest, NoLimitEvictsNothing) {
  ChunkCache cache(root(), 0);
  EXPECT_EQ(cache.root(), root());
  auto a = NewStore("etagA", 10);
  auto b = NewStore("etagB", 10);
  ASSERT_TRUE(FillAll(*a, 1));
  ASSERT_TRUE(FillAll(*b, 2));
  for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(SetAccess(*a, i, 1 + i));
  // A store made through the cache: 8 MiB chunks, one partial chunk here.
  auto small = cache.Store("etagS", 1000);
  EXPECT_EQ(small->chunk_size(), ChunkCache::kChunkSize);
  EXPECT_EQ(small->dir(), root() + "/etagS");
  ASSERT_TRUE(FillAll(*small, 3));
  EXPECT_EQ(cache.Store("etagS", 1000).get(), small.get());

  EXPECT_EQ(cache.EnforceLimit(), 20u * kChunk + 1000);
  EXPECT_EQ(a->PresentCount(), 10u);
  EXPECT_EQ(b->PresentCount(), 10u);
  EXPECT_TRUE(small->Complete());
}

TEST_F(ChunkCacheTest, LimitNotReachedEvictsNothing) {
  auto a = NewStore("etagA", 10);
  ASSERT_TRUE(FillAll(*a, 1));
  ChunkCache cache(root(), 10 * kChunk);  // exactly at the limit: not over it
  EXPECT_EQ(cache.EnforceLimit(), 10u * kChunk);
  EXPECT_EQ(a->PresentCount(), 10u);
}

TEST_F(ChunkCacheTest, CreatesItsRoot) {
  std::string nested = temp_ / "a/b/chunks";
  ChunkCache cache(nested, 0);
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_EQ(cache.EnforceLimit(), 0u);
}

TEST(ParseSizeTest, AcceptsBinaryUnits) {
  EXPECT_EQ(ParseSize("100G"), 100ull << 30);
  EXPECT_EQ(ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(ParseSize("1.5G"), 3ull << 29);
  EXPECT_EQ(ParseSize("1024"), 1024u);
  EXPECT_EQ(ParseSize("0"), 0u);
  EXPECT_EQ(ParseSize("10KiB"), 10240u);
  EXPECT_EQ(ParseSize("10K"), 10240u);
  EXPECT_EQ(ParseSize("10k"), 10240u);
  EXPECT_EQ(ParseSize("8MiB"), 8ull << 20);
  EXPECT_EQ(ParseSize("50GB"), 50ull << 30);
  EXPECT_EQ(ParseSize("2g"), 2ull << 30);
  EXPECT_EQ(ParseSize("1T"), 1ull << 40);
  EXPECT_EQ(ParseSize("1TiB"), 1ull << 40);
  EXPECT_EQ(ParseSize("0.5K"), 512u);
}

TEST(ParseSizeTest, RejectsMalformedSizes) {
  for (const char* bad : {"", "G", "abc", "-1", "-1G", "10X", "10 G", "10GG", "1.5.5G", "10GiBs",
                          "G10", "10Q", "ten"}) {
    EXPECT_FALSE(ParseSize(bad).has_value()) << '"' << bad << "\" gave " << ParseSize(bad).value_or(0);
  }
}

TEST(ParseSizeTest, RejectsNonFiniteAndOverflowingSizes) {
  for (const char* bad : {"inf", "nan", "infinity", "1e30", "1e30G", "20000000000G"}) {
    EXPECT_FALSE(ParseSize(bad).has_value()) << '"' << bad << "\" gave " << ParseSize(bad).value_or(0);
  }
}

}  // namespace
}  // namespace aprfs
