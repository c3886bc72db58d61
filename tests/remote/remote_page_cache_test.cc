// A full load of a remote model leaves it in the page cache once (issue #5: page cache <= 1.1x
// the model): through a mapping, as the .apr's pages, not also as the downloaded chunks' or the
// published blobs'. (A read() is served with direct I/O and fills no .apr pages at all.)
#include <gtest/gtest.h>
#include <sys/mman.h>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"
#include "tests/support/page_cache_probe.h"

namespace aprfs_rtest {
namespace {

using RemotePageCacheTest = RemoteTest;

TEST_F(RemotePageCacheTest, FullReadCachesTheModelOnceNotAlsoAsChunksOrBlobs) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string hf = Dir("hf");
  const std::string cache = Dir("cache");
  AprfsMount* mount =
      Mount("mnt", {"--repo", "org/big", "--cache-dir", cache, "--hf-cache", hf},
            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  // Loaded as loaders do, through a mapping.
  SequentialRead whole;
  {
    const std::string path = mount->Path("big.apr");
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const size_t size = static_cast<size_t>(FileSize(path));
    void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
    whole.bytes.assign(static_cast<const char*>(map), size);
    munmap(map, size);
    close(fd);
  }
  SequentialRead again = ReadSequentially(mount->Path("big.apr"));
  ASSERT_EQ(again.error, 0);
  ASSERT_TRUE(again.bytes == whole.bytes) << "the mapping and read() disagree";
  // Verified and published in the background: the blobs are the downloaded chunk files. Seen
  // without reading them (CheckPublished compares their bytes, which would cache them).
  auto blob = [&](const std::string& shard) {
    return hf + "/models--org--big/blobs/" + hub.Sha("org/big", shard);
  };
  bool moved = WaitFor(
      [&] {
        for (const std::string& shard : big.shards) {
          if (!PathExists(blob(shard)) || PathExists(StoreDir(cache, hub.Sha("org/big", shard)))) {
            return false;
          }
        }
        return true;
      },
      60s);
  ASSERT_TRUE(moved) << "the shards were not published within 60 s\n" << mount->Log();

  uint64_t blobs_resident = 0, blob_bytes = 0;
  for (const std::string& shard : big.shards) {
    blobs_resident += aprfs::testing::ResidentBytes(blob(shard));
    blob_bytes += FileSize(blob(shard));
  }
  const uint64_t apr_resident = aprfs::testing::ResidentBytes(mount->Path("big.apr"));
  std::fprintf(stderr, "[ note ] resident after a full read: .apr %llu of %zu bytes, blobs %llu of "
               "%llu bytes\n", static_cast<unsigned long long>(apr_resident), whole.bytes.size(),
               static_cast<unsigned long long>(blobs_resident),
               static_cast<unsigned long long>(blob_bytes));
  EXPECT_GT(apr_resident, whole.bytes.size() * 9 / 10) << "the .apr's pages were not kept";
  // A mapping's faults reach the daemon out of order: what the downloads and the readahead
  // behind them bring in around ranges already served and dropped stays, a few MB (10% of this
  // small model; see PageCacheTest in the integration tests). Not dropping would keep it all.
  EXPECT_LT(blobs_resident, whole.bytes.size() / 4)
      << blobs_resident << " bytes of the " << blob_bytes << "-byte downloaded shards stayed "
      << "cached beside " << apr_resident << " bytes of the .apr";
  EXPECT_TRUE(WaitUntilEveryShardPublished(hf, hub, "org/big", big, 30s)) << mount->Log();
  Unmount(mount);
}

}  // namespace
}  // namespace aprfs_rtest
