// Concurrency (test 6): 8 threads with their own descriptors reading random ranges of a
// 3-shard ~64 MiB model while 4 processes mmap it and read every tensor; every byte compared.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {
namespace {

// Seconds of random reading; APRFS_STRESS_SECONDS overrides (e.g. for a soak run).
double StressSeconds() {
  const char* env = std::getenv("APRFS_STRESS_SECONDS");
  return env ? std::atof(env) : 5.0;
}

struct ThreadStats {
  uint64_t reads = 0;
  uint64_t bytes = 0;
  std::string failure;  // first failure, empty if none
};

TEST_F(MountTest, ThreadsAndProcessesReadingConcurrentlyGetExactBytes) {
  SetWatchdog(150s);
  tw::TestModel model = BulkModel(3, (64ull << 20) / 3, 91);
  tw::WriteModel(Model("big"), model);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("big.apr");
  const uint64_t rss_at_start = ProcStatusKb(daemon_pid(), "VmRSS");
  const ExpectedTensors expected = ExpectedOf(model);

  // Reference: a cp of the mounted file, verified independently against the source.
  const std::string reference_path = work_dir() + "/reference.apr";
  ProcResult cp = RunCommand({"cp", path, reference_path}, 60s);
  ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
  ProcResult check = RunAprcheck(reference_path, Model("big"));
  ASSERT_EQ(check.exit_code, 0) << check.Describe();
  const std::string reference = SlurpOrEmpty(reference_path);
  const uint64_t size = reference.size();
  ASSERT_GT(size, 60ull << 20);
  ASSERT_EQ(FileSize(path), size);
  AprLayout layout = ParseAprBytes(reference);
  ASSERT_NO_FATAL_FAILURE(ExpectLayoutMatches(layout, expected));
  ExpectTensorBytes(layout, expected, reference, "reference copy");
  DropPageCache(path);

  // 4 processes mapping the file, each walking the tensors from a different starting point.
  std::vector<Child> mappers;
  for (int p = 0; p < 4; ++p) {
    mappers.push_back(StartChild([&, p]() -> int {
      Fd fd(path, O_RDONLY);
      if (!fd.ok()) return 2;
      void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (map == MAP_FAILED) return 3;
      const char* base = static_cast<const char*>(map);
      const size_t n = layout.entries.size();
      int bad = 0;
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < n; ++i) {
          const AprEntry& e = layout.entries[(i + p) % n];
          const std::string& want = expected.at(e.name).bytes;
          if (std::memcmp(base + layout.data_offset + e.offset, want.data(), want.size()) != 0) {
            dprintf(2, "process %d: tensor '%s' differs\n", p, e.name.c_str());
            ++bad;
          }
        }
        if (std::memcmp(base, reference.data(), size) != 0) {
          dprintf(2, "process %d: mapping differs from the reference\n", p);
          ++bad;
        }
        madvise(map, size, MADV_DONTNEED);  // drop our pages; the second round faults again
        posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
      }
      munmap(map, size);
      return bad ? 1 : 0;
    }));
  }

  // 8 threads, each with its own descriptor: odd ones O_DIRECT (every read reaches the daemon
  // at its exact offset and length), even ones buffered with the cache dropped now and then.
  const double seconds = StressSeconds();
  std::atomic<bool> stop{false};
  std::vector<ThreadStats> stats(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ThreadStats& s = stats[t];
      Fd fd(path, O_RDONLY | (t % 2 ? O_DIRECT : 0));
      if (!fd.ok()) {
        s.failure = std::string("open: ") + std::strerror(errno);
        return;
      }
      std::mt19937_64 rng(1000 + t);
      std::vector<char> buffer(2 << 20);
      auto start = std::chrono::steady_clock::now();
      while (!stop &&
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                 seconds) {
        // Length log-uniform in [1, 2 MiB]; offsets anywhere, a few past the end.
        uint64_t length = static_cast<uint64_t>(
            std::exp(std::uniform_real_distribution<double>(0, std::log(2.0 * (1 << 20)))(rng)));
        length = std::clamp<uint64_t>(length, 1, 2 << 20);
        uint64_t offset = rng() % (size + 4096);
        if (rng() % 16 == 0) offset = size - std::min<uint64_t>(size, rng() % 300);  // the tail
        ssize_t n = ::pread(fd.get(), buffer.data(), length, static_cast<off_t>(offset));
        uint64_t want = offset >= size ? 0 : std::min<uint64_t>(length, size - offset);
        if (n < 0) {
          s.failure = "pread(" + std::to_string(length) + " at " + std::to_string(offset) +
                      "): " + std::strerror(errno);
          break;
        }
        if (static_cast<uint64_t>(n) != want) {
          s.failure = "pread(" + std::to_string(length) + " at " + std::to_string(offset) +
                      ") returned " + std::to_string(n) + " bytes, want " + std::to_string(want);
          break;
        }
        if (n > 0 && std::memcmp(buffer.data(), reference.data() + offset, n) != 0) {
          std::string got(buffer.data(), n);
          uint64_t at = FirstDifference(got, reference.substr(offset, n)).value_or(0);
          s.failure = "pread(" + std::to_string(length) + " at " + std::to_string(offset) +
                      "): byte at file offset " + std::to_string(offset + at) +
                      " differs from the reference";
          break;
        }
        ++s.reads;
        s.bytes += static_cast<uint64_t>(n);
        if (t % 2 == 0 && s.reads % 32 == 0) posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
      }
      if (!s.failure.empty()) stop = true;
    });
  }
  for (std::thread& thread : threads) thread.join();
  uint64_t total_reads = 0, total_bytes = 0;
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(stats[t].failure, "") << "thread " << t << (t % 2 ? " (O_DIRECT)" : " (buffered)");
    EXPECT_GT(stats[t].reads, 10u) << "thread " << t << " hardly read anything";
    total_reads += stats[t].reads;
    total_bytes += stats[t].bytes;
  }
  for (size_t p = 0; p < mappers.size(); ++p) {
    ProcResult r = WaitChild(mappers[p], 90s);
    EXPECT_EQ(r.exit_code, 0) << "mmap process " << p << ": " << r.Describe();
  }
  std::fprintf(stderr,
               "concurrency: %llu reads, %.1f MiB in %.1f s; daemon RSS %llu -> peak %llu KiB\n",
               static_cast<unsigned long long>(total_reads), total_bytes / 1048576.0, seconds,
               static_cast<unsigned long long>(rss_at_start),
               static_cast<unsigned long long>(ProcStatusKb(daemon_pid(), "VmHWM")));
  RecordProperty("reads", static_cast<int>(total_reads));
  EXPECT_TRUE(DaemonAlive()) << DaemonState();
  // Bounded memory (design.md read rule 3): the daemon never holds the model. ASan keeps freed
  // memory in quarantine and TSan shadows every byte, so RSS means nothing in a sanitizer build.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  uint64_t peak = ProcStatusKb(daemon_pid(), "VmHWM");
  EXPECT_LT(peak, rss_at_start + size / 1024 / 2)
      << "daemon peak RSS " << peak << " KiB (at mount " << rss_at_start
      << " KiB) grew by more than half of the " << size / 1048576 << " MiB model";
#endif
}

// The footer CRC is built from the reads that happen anyway (design.md "The footer CRC"). Read
// the footer of fresh models while other threads read the same data for the first time: the
// footer must be the CRC32 of the preceding bytes every time, and the daemon must survive the
// moment the CRC completes while data reads are still feeding it. (Regression test: before
// commit 43267a1 the daemon segfaulted in FooterCrc::Extend in about 2 runs out of 3.)
TEST_F(MountTest, FooterReadRacingFirstDataReadsIsCorrect) {
  SetWatchdog(120s);
  constexpr int kModels = 48;
  for (int m = 0; m < kModels; ++m) {
    // One or two CRC blocks (4 MiB each) per model.
    tw::WriteModel(Model("race" + std::to_string(m)),
                   BulkModel(m % 2 ? 2 : 1, (m % 2 ? 3 : 2) << 20, 200 + m));
  }
  ASSERT_NO_FATAL_FAILURE(MountModels());
  for (int m = 0; m < kModels; ++m) {
    SCOPED_TRACE("race" + std::to_string(m));
    const std::string path = MP("race" + std::to_string(m) + ".apr");
    const uint64_t size = FileSize(path);
    ASSERT_GT(size, 4u) << DaemonLog();
    std::string footer(4, '\0'), whole(size - 4, '\0'), pieces(size - 4, '\0');
    std::atomic<int> ready{0};
    std::string errors[3];
    auto start_together = [&] {
      ready.fetch_add(1);
      while (ready.load() < 3) {
      }
    };
    std::thread footer_reader([&] {
      Fd fd(path, O_RDONLY | O_DIRECT);
      start_together();
      if (PreadFull(fd.get(), footer.data(), 4, size - 4) != 4) {
        errors[0] = std::string("footer: ") + std::strerror(errno);
      }
    });
    std::thread whole_reader([&] {
      Fd fd(path, O_RDONLY | O_DIRECT);
      start_together();
      if (PreadFull(fd.get(), whole.data(), size - 4, 0) != static_cast<int64_t>(size - 4)) {
        errors[1] = std::string("whole: ") + std::strerror(errno);
      }
    });
    std::thread piece_reader([&] {
      Fd fd(path, O_RDONLY | O_DIRECT);
      start_together();
      const uint64_t piece = 61 * 1024 + 7;
      for (uint64_t at = 0; at < size - 4; at += piece) {
        uint64_t n = std::min(piece, size - 4 - at);
        if (PreadFull(fd.get(), pieces.data() + at, n, at) != static_cast<int64_t>(n)) {
          errors[2] = "pieces at " + std::to_string(at) + ": " + std::strerror(errno);
          break;
        }
      }
    });
    footer_reader.join();
    whole_reader.join();
    piece_reader.join();
    for (const std::string& e : errors) ASSERT_EQ(e, "") << DaemonState();
    ASSERT_TRUE(DaemonAlive()) << DaemonState();
    EXPECT_EQ(FirstDifference(whole, pieces), std::nullopt);
    uint32_t crc = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(whole.data()), static_cast<uInt>(whole.size())));
    uint32_t stored = 0;
    for (int i = 3; i >= 0; --i) stored = stored << 8 | static_cast<uint8_t>(footer[i]);
    EXPECT_EQ(stored, crc) << "footer is not the CRC32 of the preceding bytes";
  }
}

}  // namespace
}  // namespace aprfs_itest
