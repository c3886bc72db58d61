// The on-disk cache of one remote file (fetch/chunk_store.h): persistence across restarts,
// rebuild on a size change, claim/write/commit/read, claims across threads and processes (the
// kernel drops a dead holder's OFD lock), crashes before Commit, eviction (hole punching), the
// seqlock that keeps an eviction racing a read from being served, publication, and concurrent
// creation of the same store by several processes.
#include "fetch/chunk_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using testing::PseudoRandomBytes;
using testing::TempDir;

// Claims, writes (in two halves, to exercise partial writes) and commits one chunk of `content`
// (the whole file's bytes). Usable in forked children: no gtest assertions.
bool FillChunk(ChunkStore& store, uint64_t chunk, const std::string& content) {
  std::unique_ptr<ChunkStore::Claim> claim = store.TryClaim(chunk);
  if (!claim) return false;
  uint64_t begin = store.ChunkBegin(chunk), length = store.ChunkLength(chunk);
  uint64_t half = length / 2;
  if (store.Write(*claim, begin, std::string_view(content).substr(begin, half)) != 0) return false;
  if (store.Write(*claim, begin + half,
                  std::string_view(content).substr(begin + half, length - half)) != 0) {
    return false;
  }
  return store.Commit(*claim) == 0;
}

bool FillAll(ChunkStore& store, const std::string& content) {
  for (uint64_t chunk = 0; chunk < store.chunk_count(); ++chunk) {
    if (!FillChunk(store, chunk, content)) return false;
  }
  return true;
}

// Reads [offset, offset+length) into a string; the error code goes to `*rc`.
std::string ReadRange(ChunkStore& store, uint64_t offset, size_t length, int* rc) {
  std::string out(length, '\0');
  *rc = store.Read(offset, length, out.data());
  return out;
}

uint64_t BlocksOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ~0ull;
  return static_cast<uint64_t>(st.st_blocks);
}

// A pipe to synchronize with forked children.
class Pipe {
 public:
  Pipe() {
    if (::pipe(fds_) != 0) throw std::runtime_error("pipe failed");
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  void Send(char c) {
    if (::write(fds_[1], &c, 1) != 1) {
      // The other side is gone; the waiting side will time out.
    }
  }
  // The next byte, or -1 on EOF / timeout.
  int Receive(int timeout_ms = 10000) {
    pollfd p{fds_[0], POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1) return -1;
    char c;
    return ::read(fds_[0], &c, 1) == 1 ? static_cast<unsigned char>(c) : -1;
  }
  void CloseRead() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    fds_[0] = -1;
  }
  void CloseWrite() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

// A forked child running `body`; its return value is the exit status. Killed and reaped on
// destruction if still running (a failed assertion in the parent must not leave it behind).
class Child {
 public:
  explicit Child(const std::function<int()>& body) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int code = 98;
      try {
        code = body();
      } catch (...) {
        code = 99;
      }
      ::_exit(code);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  // The exit status, or 128 + signal.
  int Wait() {
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

constexpr uint32_t kChunk = 4096;

class ChunkStoreTest : public ::testing::Test {
 protected:
  std::string Dir(const std::string& name = "store") const { return temp_ / name; }
  TempDir temp_;
};

TEST_F(ChunkStoreTest, CreatesAnEmptyStoreWithTheRightGeometry) {
  const uint64_t size = 3 * kChunk + 100;
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_EQ(store->size(), size);
  EXPECT_EQ(store->chunk_size(), kChunk);
  EXPECT_EQ(store->chunk_count(), 4u);
  EXPECT_EQ(store->ChunkOf(0), 0u);
  EXPECT_EQ(store->ChunkOf(kChunk - 1), 0u);
  EXPECT_EQ(store->ChunkOf(kChunk), 1u);
  EXPECT_EQ(store->ChunkBegin(3), 3u * kChunk);
  EXPECT_EQ(store->ChunkLength(0), kChunk);
  EXPECT_EQ(store->ChunkLength(3), 100u);
  EXPECT_EQ(store->PresentCount(), 0u);
  EXPECT_FALSE(store->Complete());
  EXPECT_FALSE(store->Published());
  for (uint64_t chunk = 0; chunk < 4; ++chunk) EXPECT_FALSE(store->Present(chunk));
  for (const char* name : {"data", "map", "claims", "lock"}) {
    EXPECT_TRUE(fs::exists(Dir() + "/" + name)) << name;
  }
  EXPECT_EQ(fs::file_size(Dir() + "/data"), size);
  // A sparse file: nothing allocated yet.
  EXPECT_EQ(BlocksOf(Dir() + "/data"), 0u);
}

TEST_F(ChunkStoreTest, OpenTwiceInOneProcessSharesTheObject) {
  auto a = ChunkStore::Open(Dir(), 10000, kChunk);
  auto b = ChunkStore::Open(Dir(), 10000, kChunk);
  EXPECT_EQ(a.get(), b.get());
  // Another geometry while it is open in this process is refused, not silently rebuilt.
  EXPECT_THROW(ChunkStore::Open(Dir(), 20000, kChunk), std::runtime_error);
  EXPECT_THROW(ChunkStore::Open(Dir(), 10000, 2 * kChunk), std::runtime_error);
}

TEST_F(ChunkStoreTest, OpenFailureNamesThePath) {
  std::string blocker = temp_ / "file";
  testing::WriteFile(blocker, "not a folder");
  try {
    ChunkStore::Open(blocker + "/store", 100, kChunk);
    FAIL() << "Open under a regular file succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(blocker), std::string::npos) << e.what();
  }
}

TEST_F(ChunkStoreTest, WriteCommitReadRoundTrip) {
  const uint64_t size = 3 * kChunk + 100;
  const std::string content = PseudoRandomBytes(size, 11);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  ASSERT_TRUE(FillChunk(*store, 1, content));
  EXPECT_TRUE(store->Present(1));
  EXPECT_FALSE(store->Present(0));
  EXPECT_EQ(store->PresentCount(), 1u);
  EXPECT_GT(store->LastAccess(1), 0u);

  int rc = -1;
  EXPECT_EQ(ReadRange(*store, kChunk, kChunk, &rc), content.substr(kChunk, kChunk));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ReadRange(*store, kChunk + 10, 20, &rc), content.substr(kChunk + 10, 20));
  EXPECT_EQ(rc, 0);
  // Zero bytes: always fine.
  EXPECT_EQ(store->Read(0, 0, nullptr), 0);
}

TEST_F(ChunkStoreTest, ReadOfAnAbsentChunkIsEnodata) {
  const uint64_t size = 3 * kChunk;
  const std::string content = PseudoRandomBytes(size, 12);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  int rc = 0;
  ReadRange(*store, 0, 10, &rc);
  EXPECT_EQ(rc, ENODATA);
  ASSERT_TRUE(FillChunk(*store, 0, content));
  ReadRange(*store, 0, 10, &rc);
  EXPECT_EQ(rc, 0);
  // Spanning a present chunk and an absent one.
  ReadRange(*store, kChunk - 5, 10, &rc);
  EXPECT_EQ(rc, ENODATA);
  ReadRange(*store, 2 * kChunk, 1, &rc);
  EXPECT_EQ(rc, ENODATA);
}

TEST_F(ChunkStoreTest, ReadsSpanningChunksAndTheLastPartialChunk) {
  const uint64_t size = 3 * kChunk + 100;
  const std::string content = PseudoRandomBytes(size, 13);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  ASSERT_TRUE(FillAll(*store, content));
  EXPECT_TRUE(store->Complete());
  EXPECT_EQ(store->PresentCount(), 4u);

  int rc = -1;
  EXPECT_EQ(ReadRange(*store, kChunk - 100, 200, &rc), content.substr(kChunk - 100, 200));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);
  // The last chunk is 100 bytes long.
  EXPECT_EQ(ReadRange(*store, 3 * kChunk, 100, &rc), content.substr(3 * kChunk));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ReadRange(*store, size - 1, 1, &rc), content.substr(size - 1));
  EXPECT_EQ(rc, 0);
  // Past the end of the file.
  ReadRange(*store, size - 1, 2, &rc);
  EXPECT_EQ(rc, EIO);
  ReadRange(*store, size, 1, &rc);
  EXPECT_EQ(rc, EIO);
}

TEST_F(ChunkStoreTest, ReadSpanningManyChunks) {
  // More than the 8 chunk words a read keeps on its stack.
  const uint32_t chunk = 512;
  const uint64_t size = 20 * chunk + 7;
  const std::string content = PseudoRandomBytes(size, 14);
  auto store = ChunkStore::Open(Dir(), size, chunk);
  ASSERT_TRUE(FillAll(*store, content));
  int rc = -1;
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ReadRange(*store, 100, 15 * chunk, &rc), content.substr(100, 15 * chunk));
  EXPECT_EQ(rc, 0);
  // One absent chunk in the middle of a long read.
  ASSERT_TRUE(store->Evict(12));
  ReadRange(*store, 100, 15 * chunk, &rc);
  EXPECT_EQ(rc, ENODATA);
}

TEST_F(ChunkStoreTest, WriteOutsideTheClaimedChunkIsRefused) {
  const uint64_t size = 2 * kChunk + 10;
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  auto claim = store->TryClaim(1);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->chunk(), 1u);
  EXPECT_EQ(store->Write(*claim, 0, "x"), EINVAL);
  EXPECT_EQ(store->Write(*claim, kChunk - 1, "xy"), EINVAL);
  EXPECT_EQ(store->Write(*claim, 2 * kChunk - 1, "xy"), EINVAL);
  EXPECT_EQ(store->Write(*claim, 2 * kChunk - 1, "x"), 0);
  auto last = store->TryClaim(2);
  ASSERT_TRUE(last);
  // The last chunk is 10 bytes: no write past the end of the file.
  EXPECT_EQ(store->Write(*last, 2 * kChunk, std::string(11, 'x')), EINVAL);
  EXPECT_EQ(store->Write(*last, 2 * kChunk, std::string(10, 'x')), 0);
}

TEST_F(ChunkStoreTest, StatePersistsAcrossRestart) {
  const uint64_t size = 4 * kChunk;
  const std::string content = PseudoRandomBytes(size, 15);
  {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    ASSERT_TRUE(FillChunk(*store, 0, content));
    ASSERT_TRUE(FillChunk(*store, 2, content));
  }  // destroyed: the next Open builds a new object from the files
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_TRUE(store->Present(0));
  EXPECT_FALSE(store->Present(1));
  EXPECT_TRUE(store->Present(2));
  EXPECT_FALSE(store->Present(3));
  EXPECT_EQ(store->PresentCount(), 2u);
  int rc = -1;
  EXPECT_EQ(ReadRange(*store, 2 * kChunk, kChunk, &rc), content.substr(2 * kChunk, kChunk));
  EXPECT_EQ(rc, 0);
  // And the data can be completed after the restart.
  ASSERT_TRUE(FillChunk(*store, 1, content));
  ASSERT_TRUE(FillChunk(*store, 3, content));
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);
}

TEST_F(ChunkStoreTest, ReopenWithAnotherSizeOrChunkSizeRebuildsEmpty) {
  const std::string content = PseudoRandomBytes(8 * kChunk, 16);
  {
    auto store = ChunkStore::Open(Dir(), 4 * kChunk, kChunk);
    ASSERT_TRUE(FillAll(*store, content));
  }
  {
    auto store = ChunkStore::Open(Dir(), 5 * kChunk + 1, kChunk);
    EXPECT_EQ(store->chunk_count(), 6u);
    EXPECT_EQ(store->PresentCount(), 0u);
    EXPECT_EQ(fs::file_size(Dir() + "/data"), 5 * kChunk + 1);
    int rc = 0;
    ReadRange(*store, 0, 10, &rc);
    EXPECT_EQ(rc, ENODATA);
    // The old bytes are gone from the data file, not merely hidden.
    EXPECT_EQ(BlocksOf(Dir() + "/data"), 0u);
    ASSERT_TRUE(FillChunk(*store, 0, content));
  }
  {
    // Same file size, another chunk size: rebuilt too.
    auto store = ChunkStore::Open(Dir(), 5 * kChunk + 1, 2 * kChunk);
    EXPECT_EQ(store->chunk_count(), 3u);
    EXPECT_EQ(store->PresentCount(), 0u);
  }
  {
    // A corrupt map is rebuilt rather than trusted.
    ASSERT_TRUE(fs::exists(Dir() + "/map"));
    testing::WriteFile(Dir() + "/map", "garbage");
    auto store = ChunkStore::Open(Dir(), 5 * kChunk + 1, 2 * kChunk);
    EXPECT_EQ(store->PresentCount(), 0u);
    EXPECT_FALSE(store->Published());
  }
}

TEST_F(ChunkStoreTest, ClaimsExcludeThreadsOfOneProcess) {
  auto store = ChunkStore::Open(Dir(), 4 * kChunk, kChunk);
  {
    auto first = store->TryClaim(0);
    ASSERT_TRUE(first);
    EXPECT_FALSE(store->TryClaim(0)) << "the same thread claimed chunk 0 twice";
    std::unique_ptr<ChunkStore::Claim> other_thread;
    std::unique_ptr<ChunkStore::Claim> other_chunk;
    std::thread([&] {
      other_thread = store->TryClaim(0);
      other_chunk = store->TryClaim(1);
    }).join();
    EXPECT_FALSE(other_thread) << "another thread claimed a held chunk";
    EXPECT_TRUE(other_chunk);
  }
  EXPECT_TRUE(store->TryClaim(0)) << "released claims must be claimable again";

  // Many threads racing for one chunk: exactly one wins (everybody keeps what it got until
  // all have tried).
  for (int round = 0; round < 20; ++round) {
    constexpr int kThreads = 8;
    std::atomic<int> winners{0}, arrived{0}, tried{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&] {
        arrived.fetch_add(1);
        while (arrived.load() < kThreads) std::this_thread::yield();
        auto claim = store->TryClaim(2);
        if (claim) winners.fetch_add(1);
        tried.fetch_add(1);
        while (tried.load() < kThreads) std::this_thread::yield();
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(winners.load(), 1) << "round " << round;
  }
}

TEST_F(ChunkStoreTest, ConcurrentClaimsNeverOverlap) {
  // Threads repeatedly claim the same chunk; a holder counter must never exceed one.
  auto store = ChunkStore::Open(Dir(), 2 * kChunk, kChunk);
  std::atomic<int> holders{0}, max_holders{0}, claims{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        auto claim = store->TryClaim(0);
        if (!claim) continue;
        int now = holders.fetch_add(1) + 1;
        int seen = max_holders.load();
        while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
        }
        claims.fetch_add(1);
        std::this_thread::yield();
        holders.fetch_sub(1);
      }
    });
  }
  // 200 ms, and on a busy machine (threads started late) until some claims were made.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  while (claims.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_GT(claims.load(), 0);
}

TEST_F(ChunkStoreTest, ClaimsExcludeOtherProcessesAndDieWithTheHolder) {
  const uint64_t size = 4 * kChunk;
  const std::string content = PseudoRandomBytes(size, 17);
  // Created (and closed) before the fork: the child must open its own descriptors, as another
  // process would, not inherit ours.
  ChunkStore::Open(Dir(), size, kChunk).reset();

  Pipe to_parent, to_child;
  Child child([&]() -> int {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    auto zero = store->TryClaim(0);
    auto one = store->TryClaim(1);
    if (!zero || !one) return 10;
    to_parent.Send('c');  // claimed 0 and 1
    if (to_child.Receive() != 'r') return 11;
    one.reset();          // release chunk 1 while alive
    to_parent.Send('r');
    to_child.Receive();   // then die holding chunk 0
    ::_exit(0);
  });
  ASSERT_TRUE(child.started());
  ASSERT_EQ(to_parent.Receive(), 'c');

  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_FALSE(store->TryClaim(0)) << "claimed a chunk another process holds";
  EXPECT_FALSE(store->TryClaim(1)) << "claimed a chunk another process holds";
  EXPECT_TRUE(store->TryClaim(2));

  to_child.Send('r');
  ASSERT_EQ(to_parent.Receive(), 'r');
  EXPECT_TRUE(store->TryClaim(1)) << "a released claim must be claimable by another process";
  EXPECT_FALSE(store->TryClaim(0));

  to_child.Send('x');
  ASSERT_EQ(child.Wait(), 0);
  // The holder died without releasing: the kernel dropped its lock.
  auto resumed = store->TryClaim(0);
  ASSERT_TRUE(resumed) << "a dead process's claim was not released";
  EXPECT_EQ(store->Write(*resumed, 0, content.substr(0, kChunk)), 0);
  EXPECT_EQ(store->Commit(*resumed), 0);
  EXPECT_TRUE(store->Present(0));
}

TEST_F(ChunkStoreTest, ClaimHeldHereExcludesAnotherProcess) {
  const uint64_t size = 2 * kChunk;
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  auto claim = store->TryClaim(0);
  ASSERT_TRUE(claim);
  // A forked child inherits our object and its open file descriptions (which share our OFD
  // locks); another process would open its own, so the child opens the folder under a second
  // spelling to get a fresh object with fresh descriptions.
  Child child([&]() -> int {
    auto other = ChunkStore::Open(Dir() + "/.", size, kChunk);
    if (other.get() == store.get()) return 20;
    if (other->TryClaim(0)) return 21;   // held by the parent
    if (!other->TryClaim(1)) return 22;  // free
    return 0;
  });
  ASSERT_TRUE(child.started());
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(ChunkStoreTest, CrashAfterWriteBeforeCommitLeavesTheChunkAbsent) {
  const uint64_t size = 3 * kChunk;
  const std::string content = PseudoRandomBytes(size, 18);
  ChunkStore::Open(Dir(), size, kChunk).reset();
  Child child([&]() -> int {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    if (!FillChunk(*store, 1, content)) return 30;  // committed before the crash
    auto claim = store->TryClaim(0);
    if (!claim) return 31;
    if (store->Write(*claim, 0, content.substr(0, kChunk)) != 0) return 32;
    ::_exit(0);  // crash: no Commit, no release, no destructor
  });
  ASSERT_TRUE(child.started());
  ASSERT_EQ(child.Wait(), 0);

  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_FALSE(store->Present(0));
  int rc = 0;
  ReadRange(*store, 0, 10, &rc);
  EXPECT_EQ(rc, ENODATA);
  EXPECT_TRUE(store->Present(1));
  EXPECT_EQ(ReadRange(*store, kChunk, kChunk, &rc), content.substr(kChunk, kChunk));
  EXPECT_EQ(rc, 0);
  // The next reader resumes the interrupted download.
  ASSERT_TRUE(FillChunk(*store, 0, content));
  EXPECT_EQ(ReadRange(*store, 0, 2 * kChunk, &rc), content.substr(0, 2 * kChunk));
  EXPECT_EQ(rc, 0);
}

TEST_F(ChunkStoreTest, EvictOfAClaimedChunkFails) {
  const uint64_t size = 2 * kChunk;
  const std::string content = PseudoRandomBytes(size, 19);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  ASSERT_TRUE(FillAll(*store, content));
  {
    auto claim = store->TryClaim(0);
    ASSERT_TRUE(claim);
    EXPECT_FALSE(store->Evict(0));
    EXPECT_TRUE(store->Present(0));
    // Nor from another thread.
    bool evicted = true;
    std::thread([&] { evicted = store->Evict(0); }).join();
    EXPECT_FALSE(evicted);
  }
  // Claimed by another process.
  Pipe to_parent, to_child;
  Child child([&]() -> int {
    auto other = ChunkStore::Open(Dir() + "/.", size, kChunk);
    auto claim = other->TryClaim(1);
    if (!claim) return 40;
    to_parent.Send('c');
    to_child.Receive();
    return 0;
  });
  ASSERT_TRUE(child.started());
  ASSERT_EQ(to_parent.Receive(), 'c');
  EXPECT_FALSE(store->Evict(1)) << "evicted a chunk another process holds";
  EXPECT_TRUE(store->Present(1));
  to_child.Send('x');
  ASSERT_EQ(child.Wait(), 0);
  EXPECT_TRUE(store->Evict(1));
  EXPECT_TRUE(store->Evict(0));
  EXPECT_EQ(store->PresentCount(), 0u);
}

TEST_F(ChunkStoreTest, EvictPunchesAHole) {
  const uint32_t chunk = 64 << 10;
  const uint64_t size = 4ull * chunk;
  const std::string content = PseudoRandomBytes(size, 20);
  auto store = ChunkStore::Open(Dir(), size, chunk);
  ASSERT_TRUE(FillAll(*store, content));
  const std::string data = Dir() + "/data";
  uint64_t before = BlocksOf(data);
  ASSERT_GE(before, size / 512) << "the data file is not allocated after commits";

  EXPECT_TRUE(store->Evict(1));
  EXPECT_FALSE(store->Present(1));
  EXPECT_EQ(store->PresentCount(), 3u);
  uint64_t after = BlocksOf(data);
  EXPECT_LE(after, before - chunk / 512) << "no hole punched: " << before << " -> " << after;
  EXPECT_EQ(fs::file_size(data), size) << "eviction must keep the file size";
  int rc = 0;
  ReadRange(*store, chunk, 10, &rc);
  EXPECT_EQ(rc, ENODATA);
  // The neighbours are intact.
  EXPECT_EQ(ReadRange(*store, 0, chunk, &rc), content.substr(0, chunk));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ReadRange(*store, 2 * chunk, 2 * chunk, &rc), content.substr(2 * chunk));
  EXPECT_EQ(rc, 0);
  // An absent chunk cannot be evicted again.
  EXPECT_FALSE(store->Evict(1));
  // Refilled after eviction.
  ASSERT_TRUE(FillChunk(*store, 1, content));
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);
}

// The last chunk ends mid-block: its eviction frees that block too, not just zeroes it.
TEST_F(ChunkStoreTest, EvictOfThePartialLastChunkLeavesNoData) {
  const uint32_t chunk = 64 << 10;
  const uint64_t size = 2ull * chunk + 5000;
  const std::string content = PseudoRandomBytes(size, 23);
  auto store = ChunkStore::Open(Dir(), size, chunk);
  ASSERT_TRUE(FillAll(*store, content));
  ASSERT_TRUE(store->Evict(2));
  int fd = ::open((Dir() + "/data").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  off_t at = ::lseek(fd, 2 * chunk, SEEK_DATA);
  int err = errno;
  ::close(fd);
  EXPECT_TRUE(at < 0 && err == ENXIO) << "data left at " << at;
  EXPECT_EQ(fs::file_size(Dir() + "/data"), size);
}

// A failed download's bytes are freed; a present chunk is never discarded.
TEST_F(ChunkStoreTest, DiscardFreesAFailedDownload) {
  const uint32_t chunk = 64 << 10;
  const uint64_t size = 3ull * chunk;
  const std::string content = PseudoRandomBytes(size, 24);
  auto store = ChunkStore::Open(Dir(), size, chunk);
  ASSERT_TRUE(FillChunk(*store, 0, content));
  const std::string data = Dir() + "/data";
  const uint64_t before = BlocksOf(data);
  {
    auto claim = store->TryClaim(1);
    ASSERT_TRUE(claim);
    ASSERT_EQ(store->Write(*claim, chunk, std::string_view(content).substr(chunk, chunk / 2)), 0);
    int fd = ::open(data.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::fdatasync(fd), 0);
    ::close(fd);
    EXPECT_GT(BlocksOf(data), before);
    store->Discard(*claim);
  }
  EXPECT_EQ(BlocksOf(data), before) << "the partial chunk still takes disk";
  EXPECT_FALSE(store->Present(1));
  auto claim = store->TryClaim(0);
  ASSERT_TRUE(claim);
  store->Discard(*claim);
  int rc = 0;
  EXPECT_EQ(ReadRange(*store, 0, chunk, &rc), content.substr(0, chunk));
  EXPECT_EQ(rc, 0);
}

TEST_F(ChunkStoreTest, EvictionStatePersistsAcrossRestart) {
  const uint64_t size = 3 * kChunk;
  const std::string content = PseudoRandomBytes(size, 21);
  {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    ASSERT_TRUE(FillAll(*store, content));
    ASSERT_TRUE(store->Evict(1));
  }
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_TRUE(store->Present(0));
  EXPECT_FALSE(store->Present(1));
  EXPECT_TRUE(store->Present(2));
}

TEST_F(ChunkStoreTest, ReadsRacingEvictionsNeverReturnWrongBytes) {
  const uint64_t chunks = 8;
  const uint64_t size = chunks * kChunk - 123;
  const std::string content = PseudoRandomBytes(size, 22);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  ASSERT_TRUE(FillAll(*store, content));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> commits{0}, evictions{0}, good{0}, nodata{0}, wrong{0}, other{0};
  std::thread writer([&] {
    while (!stop.load()) {
      for (uint64_t chunk = 0; chunk < chunks; ++chunk) {
        if (store->Present(chunk)) continue;
        auto claim = store->TryClaim(chunk);
        if (!claim || store->Present(chunk)) continue;
        uint64_t begin = store->ChunkBegin(chunk);
        std::string_view bytes = std::string_view(content).substr(begin, store->ChunkLength(chunk));
        if (store->Write(*claim, begin, bytes) == 0 && store->Commit(*claim) == 0) ++commits;
      }
      std::this_thread::yield();
    }
  });
  std::thread evictor([&] {
    std::mt19937 random(1);
    while (!stop.load()) {
      if (store->Evict(random() % chunks)) ++evictions;
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 random(100 + r);
      std::string buffer;
      while (!stop.load()) {
        uint64_t offset = random() % size;
        size_t length = 1 + random() % std::min<uint64_t>(3 * kChunk, size - offset);
        buffer.assign(length, '\xAA');
        int rc = store->Read(offset, length, buffer.data());
        if (rc == 0) {
          if (std::memcmp(buffer.data(), content.data() + offset, length) == 0) {
            ++good;
          } else {
            ++wrong;
          }
        } else if (rc == ENODATA) {
          ++nodata;
        } else {
          ++other;
        }
      }
    });
  }
  // 1 s, and on a busy machine (threads started late) until each kind of event happened.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  while ((good.load() == 0 || evictions.load() == 0 || commits.load() == 0) &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  writer.join();
  evictor.join();
  for (auto& reader : readers) reader.join();

  EXPECT_EQ(wrong.load(), 0u) << "a read returned bytes other than the committed ones";
  EXPECT_EQ(other.load(), 0u);
  EXPECT_GT(good.load(), 0u);
  EXPECT_GT(evictions.load(), 0u);
  EXPECT_GT(commits.load(), 0u);
  RecordProperty("reads_ok", std::to_string(good.load()));
  RecordProperty("reads_enodata", std::to_string(nodata.load()));
  RecordProperty("evictions", std::to_string(evictions.load()));
}

TEST_F(ChunkStoreTest, PublishedStoreIsNeitherEvictedNorWritten) {
  const uint64_t size = 3 * kChunk;
  const std::string content = PseudoRandomBytes(size, 23);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  ASSERT_TRUE(FillChunk(*store, 0, content));
  EXPECT_FALSE(store->ClaimPublication()) << "an incomplete store cannot be published";
  EXPECT_FALSE(store->Published());
  ASSERT_TRUE(FillChunk(*store, 1, content));
  ASSERT_TRUE(FillChunk(*store, 2, content));

  auto publication = store->ClaimPublication();
  ASSERT_TRUE(publication);
  EXPECT_TRUE(store->Published());
  EXPECT_FALSE(store->ClaimPublication()) << "published twice";
  EXPECT_FALSE(store->TryClaim(store->chunk_count())) << "the publication's byte is no chunk";
  EXPECT_FALSE(store->Evict(0));
  EXPECT_TRUE(store->Present(0));
  {
    auto claim = store->TryClaim(1);
    ASSERT_TRUE(claim);
    EXPECT_EQ(store->Write(*claim, kChunk, "zz"), EROFS);
  }
  store->DropAll();
  EXPECT_EQ(store->PresentCount(), 3u) << "DropAll dropped chunks of a published file";
  int rc = -1;
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);

  // The flag is in the map: another process sees it while the publisher lives.
  Child child([&]() -> int {
    auto other = ChunkStore::Open(Dir() + "/.", size, kChunk);
    if (other.get() == store.get()) return 20;
    if (!other->Published()) return 21;
    if (other->Evict(2)) return 22;
    return 0;
  });
  ASSERT_TRUE(child.started());
  EXPECT_EQ(child.Wait(), 0);

  // Undone (publication failed): evictable and writable again.
  store->AbandonPublication(*publication);
  EXPECT_FALSE(store->Published());
  {
    auto claim = store->TryClaim(1);
    ASSERT_TRUE(claim);
    EXPECT_EQ(store->Write(*claim, kChunk, content.substr(kChunk, 2)), 0);
  }
  EXPECT_TRUE(store->Evict(0));
  EXPECT_FALSE(store->Present(0));
}

// A publisher killed between marking the store and removing it (the CI's RemoteKillTest caught
// a shard left published forever, never reaching the HF cache).
TEST_F(ChunkStoreTest, PublicationInterruptedByItsPublishersDeathIsUndoneByTheNextOpen) {
  const uint64_t size = 3 * kChunk + 5;
  const std::string content = PseudoRandomBytes(size, 26);
  {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    ASSERT_TRUE(FillAll(*store, content));
  }
  // `move_data`: the publisher dies after moving the data file away (into the HF cache).
  auto publish_then_die = [&](bool move_data) {
    Pipe to_parent;
    auto child = std::make_unique<Child>([&]() -> int {
      auto store = ChunkStore::Open(Dir(), size, kChunk);
      auto publication = store->ClaimPublication();
      if (!publication) return 30;
      if (move_data && ::rename((Dir() + "/data").c_str(), (Dir() + "/moved").c_str()) != 0) {
        return 31;
      }
      to_parent.Send('p');
      ::pause();  // killed here, holding the publication
      return 32;
    });
    EXPECT_EQ(to_parent.Receive(), 'p');
    return child;
  };

  auto publisher = publish_then_die(false);
  {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    EXPECT_TRUE(store->Published()) << "a live publisher's store was undone";
    EXPECT_FALSE(store->Evict(0));
  }
  publisher.reset();  // SIGKILL
  {
    auto store = ChunkStore::Open(Dir(), size, kChunk);
    EXPECT_FALSE(store->Published()) << "left published by a dead process";
    EXPECT_TRUE(store->Complete()) << "the data was still here: nothing to download again";
    int rc = -1;
    EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
    EXPECT_EQ(rc, 0);
    EXPECT_TRUE(store->ClaimPublication()) << "cannot be published again";
  }
  {
    auto store = ChunkStore::Open(Dir(), size, kChunk);  // released with the object above
    EXPECT_FALSE(store->Published());
  }

  publisher = publish_then_die(true);
  publisher.reset();
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_FALSE(store->Published());
  EXPECT_EQ(store->PresentCount(), 0u) << "chunks marked present without their data file";
  EXPECT_EQ(BlocksOf(Dir() + "/data"), 0u);
  ASSERT_TRUE(FillAll(*store, content));
  int rc = -1;
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);
}

TEST_F(ChunkStoreTest, DropAllDropsEveryChunk) {
  const uint32_t chunk = 64 << 10;
  const uint64_t size = 3ull * chunk;
  const std::string content = PseudoRandomBytes(size, 24);
  auto store = ChunkStore::Open(Dir(), size, chunk);
  ASSERT_TRUE(FillAll(*store, content));
  uint64_t before = BlocksOf(Dir() + "/data");
  store->DropAll();
  EXPECT_EQ(store->PresentCount(), 0u);
  EXPECT_FALSE(store->Complete());
  EXPECT_LT(BlocksOf(Dir() + "/data"), before);
  int rc = 0;
  ReadRange(*store, 0, 1, &rc);
  EXPECT_EQ(rc, ENODATA);
  // Refillable (the download starts over).
  ASSERT_TRUE(FillAll(*store, content));
  EXPECT_EQ(ReadRange(*store, 0, size, &rc), content);
  EXPECT_EQ(rc, 0);
  // DropAll on an empty store is harmless.
  store->DropAll();
  store->DropAll();
  EXPECT_EQ(store->PresentCount(), 0u);
}

// Which version of a remote file the chunks are (the fingerprint of the server's ETag or
// Last-Modified): recorded once, shared across processes and restarts; replacing it drops every
// chunk of the old version, and a download of the old version can then no longer be committed.
TEST_F(ChunkStoreTest, ValidatorIsRecordedOnceAndReplacingItDropsTheOldVersion) {
  const uint64_t size = 3 * kChunk + 10;
  const std::string v1 = PseudoRandomBytes(size, 31), v2 = PseudoRandomBytes(size, 32);
  auto store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_EQ(store->Validator(), 0u) << "a new store records no version";
  EXPECT_TRUE(store->AdoptValidator(111));
  EXPECT_TRUE(store->AdoptValidator(111)) << "the same version again";
  EXPECT_FALSE(store->AdoptValidator(222)) << "another version is not adopted over it";
  EXPECT_EQ(store->Validator(), 111u);

  // Chunks 0 and 1 of version 111; chunk 2 is being downloaded (claimed) as 111 too.
  for (uint64_t chunk : {0, 1}) {
    auto claim = store->TryClaim(chunk);
    ASSERT_TRUE(claim);
    ASSERT_EQ(store->Write(*claim, store->ChunkBegin(chunk),
                           std::string_view(v1).substr(store->ChunkBegin(chunk), kChunk)), 0);
    ASSERT_EQ(store->Commit(*claim, 111), 0);
  }
  auto late = store->TryClaim(2);
  ASSERT_TRUE(late);
  ASSERT_EQ(store->Write(*late, 2 * kChunk, std::string_view(v1).substr(2 * kChunk, kChunk)), 0);

  EXPECT_FALSE(store->ReplaceValidator(999, 222)) << "replaced although it was not 999";
  EXPECT_EQ(store->PresentCount(), 2u);
  const uint64_t blocks = BlocksOf(Dir() + "/data");
  ASSERT_TRUE(store->ReplaceValidator(111, 222));
  EXPECT_EQ(store->Validator(), 222u);
  EXPECT_EQ(store->PresentCount(), 0u) << "chunks of the old version kept";
  EXPECT_LT(BlocksOf(Dir() + "/data"), blocks) << "their disk space was not freed";
  // The download of the old version that was in flight cannot make its chunk present.
  EXPECT_EQ(store->Commit(*late, 111), ESTALE);
  EXPECT_FALSE(store->Present(2));
  late.reset();

  // The new version fills the store; another process sees the same version.
  auto claim = store->TryClaim(0);
  ASSERT_TRUE(claim);
  ASSERT_EQ(store->Write(*claim, 0, std::string_view(v2).substr(0, kChunk)), 0);
  ASSERT_EQ(store->Commit(*claim, 222), 0);
  claim.reset();
  Child child([&]() -> int {
    auto other = ChunkStore::Open(Dir(), size, kChunk);
    std::string bytes(kChunk, '\0');
    if (other->Validator() != 222) return 1;
    if (other->Read(0, kChunk, bytes.data()) != 0 || bytes != v2.substr(0, kChunk)) return 2;
    return 0;
  });
  EXPECT_EQ(child.Wait(), 0);
  store.reset();
  store = ChunkStore::Open(Dir(), size, kChunk);
  EXPECT_EQ(store->Validator(), 222u) << "not kept across a restart";
  // A published store keeps its version: its bytes are verified.
  ASSERT_TRUE(FillAll(*store, v2));
  auto publication = store->ClaimPublication();
  ASSERT_TRUE(publication);
  EXPECT_FALSE(store->ReplaceValidator(222, 333));
  EXPECT_TRUE(store->Complete());
  EXPECT_EQ(store->Validator(), 222u);
}

TEST_F(ChunkStoreTest, ProcessesCreatingTheSameStoreConcurrentlyAgree) {
  constexpr int kProcesses = 8;
  const uint64_t size = kProcesses * kChunk + 17;
  const std::string content = PseudoRandomBytes(size, 25);
  for (int round = 0; round < 30; ++round) {
    const bool phased = round % 2 == 0;
    const std::string dir = Dir("race" + std::to_string(round));
    Pipe start, opened, go;
    std::vector<std::unique_ptr<Child>> children;
    for (int i = 0; i < kProcesses; ++i) {
      children.push_back(std::make_unique<Child>([&, i]() -> int {
        start.CloseWrite();
        opened.CloseRead();
        go.CloseWrite();
        if (start.Receive() != -1) return 50;  // EOF: everybody starts at once
        auto store = ChunkStore::Open(dir, size, kChunk);
        if (store->size() != size || store->chunk_count() != kProcesses + 1) return 51;
        if (store->Published()) return 52;
        if (store->Present(i)) return 53;
        if (phased) {
          // Every process sees an empty map before anybody commits.
          if (store->PresentCount() != 0) return 54;
          opened.Send('o');
          if (go.Receive() != -1) return 55;
        }
        // Committed right after Open: a late opener rebuilding the store would lose it.
        if (!FillChunk(*store, i, content)) return 56;
        return 0;
      }));
      ASSERT_TRUE(children.back()->started());
    }
    start.CloseWrite();
    if (phased) {
      for (int i = 0; i < kProcesses; ++i) ASSERT_EQ(opened.Receive(), 'o') << "round " << round;
      go.CloseWrite();
    }
    for (int i = 0; i < kProcesses; ++i) {
      ASSERT_EQ(children[i]->Wait(), 0) << "round " << round << " child " << i;
    }
    auto store = ChunkStore::Open(dir, size, kChunk);
    EXPECT_EQ(store->PresentCount(), static_cast<uint64_t>(kProcesses)) << "round " << round;
    int rc = -1;
    bool same = ReadRange(*store, 0, kProcesses * kChunk, &rc) == content.substr(0, kProcesses * kChunk);
    EXPECT_EQ(rc, 0) << "round " << round;
    EXPECT_TRUE(same) << "round " << round << ": committed bytes lost";
  }
}

// Pages of the data file in the page cache, in [offset, offset + length).
size_t ResidentPages(const std::string& path, uint64_t offset, uint64_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SIZE_MAX;
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  ::close(fd);
  if (map == MAP_FAILED) return SIZE_MAX;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((length + page - 1) / page);
  size_t resident = SIZE_MAX;
  if (::mincore(map, length, in_core.data()) == 0) {
    resident = 0;
    for (unsigned char bit : in_core) resident += bit & 1;
  }
  ::munmap(map, length);
  return resident;
}

// Whether files in `dir` can be opened with O_DIRECT.
bool DirectIo(const std::string& dir) {
  const int probe = ::open((dir + "/probe").c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (probe >= 0) ::close(probe);
  return probe >= 0;
}

// Page-aligned memory, as the commit lane writes from.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t size)
      : bytes(static_cast<char*>(std::aligned_alloc(ChunkStore::kDirectAlignment, size))) {
    if (bytes == nullptr) throw std::bad_alloc();
  }
  ~AlignedBuffer() { std::free(bytes); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* bytes;
};

// Whole chunks written from page-aligned memory go past the page cache (the daemon serves them
// from that memory); anything else goes through it. Both read back exactly.
TEST_F(ChunkStoreTest, AlignedWritesGoPastThePageCacheOthersThroughIt) {
  constexpr uint32_t kBig = 1 << 20;
  const uint64_t size = 3 * kBig + 100;
  const std::string content = PseudoRandomBytes(size, 31);
  if (!DirectIo(Dir("."))) GTEST_SKIP() << "the test folder's filesystem has no O_DIRECT";
  auto store = ChunkStore::Open(Dir(), size, kBig);
  AlignedBuffer buffer(kBig);
  char* aligned = buffer.bytes;
  auto write_from = [&](uint64_t chunk, const char* from) {
    std::unique_ptr<ChunkStore::Claim> claim = store->TryClaim(chunk);
    ASSERT_TRUE(claim);
    const uint64_t begin = store->ChunkBegin(chunk), length = store->ChunkLength(chunk);
    ASSERT_EQ(store->Write(*claim, begin, std::string_view(from, length)), 0);
    ASSERT_EQ(store->Commit(*claim), 0);
  };
  std::memcpy(aligned, content.data(), kBig);
  write_from(0, aligned);
  // The same bytes one byte off the alignment: through the page cache.
  std::string unaligned = " " + content.substr(kBig, kBig);
  write_from(1, unaligned.data() + 1);
  write_from(3, content.data() + 3 * kBig);  // the last chunk: 100 bytes
  const std::string data = Dir() + "/data";
  EXPECT_EQ(ResidentPages(data, 0, kBig), 0u) << "an aligned whole chunk went to the page cache";
  EXPECT_GT(ResidentPages(data, kBig, kBig), 0u) << "the test cannot tell the two apart";
  int rc = -1;
  EXPECT_TRUE(ReadRange(*store, 0, 2 * kBig, &rc) == content.substr(0, 2 * kBig));
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(ReadRange(*store, 3 * kBig, 100, &rc) == content.substr(3 * kBig));
  EXPECT_EQ(rc, 0);
}

// A read behind its reader (whose next bytes were served already) must not leave the kernel's
// readahead of the data file in the page cache: nobody would read or drop it.
TEST_F(ChunkStoreTest, AReadWithoutReadAheadCachesNothingBeyondItsRange) {
  constexpr uint32_t kBig = 1 << 20;
  constexpr size_t kPiece = 64 << 10;
  const uint64_t size = 4 * kBig;
  const std::string content = PseudoRandomBytes(size, 37);
  if (!DirectIo(Dir("."))) GTEST_SKIP() << "the test folder's filesystem has no O_DIRECT";
  auto store = ChunkStore::Open(Dir(), size, kBig);
  AlignedBuffer buffer(kBig);
  char* aligned = buffer.bytes;
  for (uint64_t chunk = 0; chunk < 4; ++chunk) {  // past the page cache: nothing cached
    std::memcpy(aligned, content.data() + chunk * kBig, kBig);
    std::unique_ptr<ChunkStore::Claim> claim = store->TryClaim(chunk);
    ASSERT_TRUE(claim);
    ASSERT_EQ(store->Write(*claim, chunk * kBig, std::string_view(aligned, kBig)), 0);
    ASSERT_EQ(store->Commit(*claim), 0);
  }
  const std::string data = Dir() + "/data";
  ASSERT_EQ(ResidentPages(data, 0, size), 0u);
  // At the start of the file: where the kernel reads ahead of a first read.
  std::string out(kPiece, '\0');
  ASSERT_EQ(store->Read(0, kPiece, out.data(), /*read_ahead=*/false), 0);
  EXPECT_TRUE(out == content.substr(0, kPiece));
  EXPECT_EQ(ResidentPages(data, 0, size), 0u) << "read ahead (or not dropped once served)";
  // The same read with readahead leaves the kernel's readahead behind it: the test can tell.
  ASSERT_EQ(store->Read(0, kPiece, out.data(), /*read_ahead=*/true), 0);
  EXPECT_TRUE(out == content.substr(0, kPiece));
  EXPECT_GT(ResidentPages(data, kPiece, size - kPiece), 0u) << "the test cannot tell the two apart";
}

}  // namespace
}  // namespace aprfs
