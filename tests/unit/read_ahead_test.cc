// ReadAhead: a sequential direct reader's next windows are read on another thread while the
// current reply is delivered; every request gets exactly the file's bytes, whether served from
// the windows or read by the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fs/read_ahead.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

constexpr size_t kWindow = ReadAhead::kWindow;

// A file in memory, read through ReadFn (as VirtualFile::Read would be), counting its reads.
struct MemoryFile {
  explicit MemoryFile(uint64_t size) : bytes(testing::PseudoRandomBytes(size, size)) {}

  ReadAhead::ReadFn Reader() {
    return [this](uint64_t offset, size_t length, char* dst) -> ssize_t {
      {
        std::unique_lock lock(mu);
        reads.push_back(offset);
        gate_changed.wait(lock, [&] { return open_gate; });
        if (failing.count(offset)) return -EIO;
      }
      if (offset >= bytes.size()) return 0;
      const size_t n = std::min<uint64_t>(length, bytes.size() - offset);
      std::memcpy(dst, bytes.data() + offset, n);
      return static_cast<ssize_t>(n);
    };
  }
  size_t ReadCount() {
    std::lock_guard lock(mu);
    return reads.size();
  }
  void SetGate(bool open) {
    std::lock_guard lock(mu);
    open_gate = open;
    gate_changed.notify_all();
  }

  std::string bytes;
  std::mutex mu;
  std::condition_variable gate_changed;
  bool open_gate = true;
  std::vector<uint64_t> reads;  // offsets the read ahead asked for
  std::set<uint64_t> failing;   // windows whose read fails
};

// What one request got, and how.
struct Served {
  std::string bytes;
  bool from_windows = false;
  int iovecs = 0;
};

// Serves a request as the FUSE adapter does: from the windows, else by reading it directly.
Served Serve(ReadAhead& ahead, const MemoryFile& file, uint64_t offset, size_t length) {
  Served served;
  auto deliver = [&](const struct iovec* iov, int count) {
    served.iovecs = count;
    for (int i = 0; i < count; ++i) {
      served.bytes.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    }
  };
  std::optional<size_t> n = ahead.TryServe(offset, length, deliver);
  if (n) {
    served.from_windows = true;
    EXPECT_EQ(*n, served.bytes.size());
  } else if (offset < file.bytes.size()) {
    served.bytes = file.bytes.substr(offset, length);
  }
  return served;
}

// Request sizes: a reader whose buffer is not page aligned (each 1 MiB read() comes as two
// requests), and one whose requests do not divide the window (some straddle two windows).
class ReadAheadPatterns : public ::testing::TestWithParam<std::vector<size_t>> {};

TEST_P(ReadAheadPatterns, SequentialReadsAreServedFromWindowsWithTheFilesBytes) {
  const std::vector<size_t>& sizes = GetParam();
  MemoryFile file(7 * kWindow + 12345);
  auto owner = std::make_unique<ReadAhead>(file.Reader());
  ReadAhead& ahead = *owner;
  uint64_t offset = 0;
  int served_from_windows = 0, requests = 0, straddled = 0;
  while (offset < file.bytes.size()) {
    const size_t length = sizes[requests % sizes.size()];
    Served s = Serve(ahead, file, offset, length);
    ASSERT_TRUE(s.bytes == file.bytes.substr(offset, length)) << "at " << offset;
    served_from_windows += s.from_windows;
    straddled += s.iovecs == 2;
    offset += length;
    ++requests;
  }
  // The caller reads the requests up to the one that makes half a window, then none.
  int by_caller = 0;
  for (uint64_t run = 0; run < ReadAhead::kStartAfter; ++by_caller) {
    run += sizes[by_caller % sizes.size()];
  }
  EXPECT_EQ(served_from_windows, requests - by_caller);
  if (kWindow % sizes[0] != 0 && sizes.size() == 1) {
    EXPECT_GT(straddled, 0);
  }
  owner.reset();  // its thread may still read a window past the end: joined first
  std::set<uint64_t> distinct(file.reads.begin(), file.reads.end());
  EXPECT_EQ(distinct.size(), file.reads.size()) << "a window was read twice";
  EXPECT_LE(file.reads.size(), file.bytes.size() / kWindow + 1 + ReadAhead::kWindows)
      << "windows far past the end";
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReadAheadPatterns,
                         ::testing::Values(std::vector<size_t>{kWindow - 3996, 3996},
                                           std::vector<size_t>{300 * 1024},
                                           std::vector<size_t>{kWindow}));

TEST(ReadAhead, SmallSequentialReadsStartReadingAheadAfterHalfAWindow) {
  MemoryFile file(4 * kWindow);
  ReadAhead ahead(file.Reader());
  const size_t piece = 4096;
  uint64_t offset = 0;
  for (; offset < ReadAhead::kStartAfter - piece; offset += piece) {
    Served s = Serve(ahead, file, offset, piece);
    ASSERT_FALSE(s.from_windows);
    ASSERT_TRUE(s.bytes == file.bytes.substr(offset, piece));
  }
  EXPECT_EQ(file.ReadCount(), 0u) << "a reader of a few small pieces had windows read ahead";
  int from_windows = 0;
  for (; offset < file.bytes.size(); offset += piece) {
    Served s = Serve(ahead, file, offset, piece);
    ASSERT_TRUE(s.bytes == file.bytes.substr(offset, piece)) << "at " << offset;
    from_windows += s.from_windows;
  }
  EXPECT_GT(from_windows, static_cast<int>(3 * kWindow / piece));
}

TEST(ReadAhead, RandomReadsReadNothingAhead) {
  MemoryFile file(16 * kWindow);
  ReadAhead ahead(file.Reader());
  for (uint64_t i = 0; i < 64; ++i) {
    const uint64_t offset = (i * 7919 % 61) * (kWindow / 4) + 1;
    Served s = Serve(ahead, file, offset, 128 * 1024);
    EXPECT_FALSE(s.from_windows);
    EXPECT_TRUE(s.bytes == file.bytes.substr(offset, 128 * 1024));
  }
  EXPECT_EQ(file.ReadCount(), 0u);
}

TEST(ReadAhead, TheEndOfTheFileGivesTheExactCount) {
  MemoryFile file(3 * kWindow + 777);
  ReadAhead ahead(file.Reader());
  uint64_t offset = 0;
  while (offset < file.bytes.size()) {
    Served s = Serve(ahead, file, offset, kWindow);
    ASSERT_TRUE(s.bytes == file.bytes.substr(offset, kWindow)) << "at " << offset;
    offset += kWindow;
  }
  Served past = Serve(ahead, file, offset, kWindow);  // a read at the end: nothing
  EXPECT_EQ(past.bytes, "");
}

TEST(ReadAhead, AFailedWindowLeavesTheRequestToTheCaller) {
  MemoryFile file(6 * kWindow);
  file.failing.insert(2 * kWindow);
  ReadAhead ahead(file.Reader());
  int from_windows = 0;
  for (uint64_t offset = 0; offset < file.bytes.size(); offset += kWindow) {
    Served s = Serve(ahead, file, offset, kWindow);
    ASSERT_TRUE(s.bytes == file.bytes.substr(offset, kWindow)) << "at " << offset;
    if (offset == 2 * kWindow) {
      EXPECT_FALSE(s.from_windows);
    }
    from_windows += s.from_windows;
  }
  EXPECT_EQ(from_windows, 4) << "the windows after the failed one were not read ahead";
}

TEST(ReadAhead, AJumpDropsTheWindowsAndANewRunStartsOver) {
  MemoryFile file(32 * kWindow);
  ReadAhead ahead(file.Reader());
  for (uint64_t offset = 0; offset < 4 * kWindow; offset += kWindow) {
    ASSERT_TRUE(Serve(ahead, file, offset, kWindow).bytes == file.bytes.substr(offset, kWindow));
  }
  const uint64_t far = 20 * kWindow + 4096;
  Served jump = Serve(ahead, file, far, kWindow);
  EXPECT_FALSE(jump.from_windows);
  EXPECT_TRUE(jump.bytes == file.bytes.substr(far, kWindow));
  Served next = Serve(ahead, file, far + kWindow, kWindow);
  EXPECT_TRUE(next.from_windows);
  EXPECT_TRUE(next.bytes == file.bytes.substr(far + kWindow, kWindow));
}

TEST(ReadAhead, AtMostMaxStreamsReadAheadAtOnce) {
  MemoryFile file(8 * kWindow);
  std::vector<std::unique_ptr<ReadAhead>> streams;
  for (int i = 0; i <= ReadAhead::kMaxStreams; ++i) {
    streams.push_back(std::make_unique<ReadAhead>(file.Reader()));
  }
  auto served_from_windows = [&](ReadAhead& ahead) {
    int n = 0;
    for (uint64_t offset = 0; offset < 4 * kWindow; offset += kWindow) {
      Served s = Serve(ahead, file, offset, kWindow);
      EXPECT_TRUE(s.bytes == file.bytes.substr(offset, kWindow));
      n += s.from_windows;
    }
    return n;
  };
  for (int i = 0; i < ReadAhead::kMaxStreams; ++i) EXPECT_GT(served_from_windows(*streams[i]), 0);
  EXPECT_EQ(served_from_windows(*streams.back()), 0) << "one stream more than allowed";
  streams.front().reset();  // its place is free again
  ReadAhead again(file.Reader());
  EXPECT_GT(served_from_windows(again), 0);
}

// Destroyed (the file released) while its thread is in the middle of a read: waits for it.
TEST(ReadAhead, DestroyedWhileAWindowIsBeingRead) {
  MemoryFile file(8 * kWindow);
  auto ahead = std::make_unique<ReadAhead>(file.Reader());
  file.SetGate(false);
  std::thread caller([&] { Serve(*ahead, file, 0, kWindow); });  // starts reading ahead
  caller.join();
  while (file.ReadCount() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    ahead.reset();
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(destroyed) << "did not wait for the read in flight";
  file.SetGate(true);
  destroyer.join();
  EXPECT_TRUE(destroyed);
}

// Several threads of one process reading one open file at once (pread at their own offsets,
// some sequential): every request gets the file's bytes.
TEST(ReadAhead, ConcurrentRequestsOnOneFileGetTheFilesBytes) {
  MemoryFile file(24 * kWindow + 99);
  ReadAhead ahead(file.Reader());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const size_t length = t % 2 == 0 ? 300 * 1024 : kWindow;
      for (uint64_t offset = t * 6 * kWindow; offset < (t + 1) * 6 * kWindow; offset += length) {
        Served s = Serve(ahead, file, offset, length);
        if (s.bytes != file.bytes.substr(offset, length)) wrong++;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace aprfs
