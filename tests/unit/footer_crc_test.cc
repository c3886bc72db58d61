// FooterCrc: the CRC32 of the virtual file, built up from the reads that happen anyway and
// completed by reading only what is missing (design.md "The footer CRC"). Reference: zlib.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fs/footer_crc.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBlock = FooterCrc::kBlockSize;

const std::string& Data() {
  static const std::string data = testing::PseudoRandomBytes(14 * kMiB, 0xC0FFEE);
  return data;
}

uint32_t Reference(uint64_t length) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(Data().data()), static_cast<uInt>(length)));
}

// A RangeReader over Data() that records what it is asked for.
struct RecordingReader {
  std::vector<std::pair<uint64_t, size_t>> reads;
  uint64_t bytes = 0;
  uint64_t limit = ~uint64_t{0};  // reads allowed before failing with `error`
  int error = EIO;
  std::mutex mu;

  RangeReader Reader() {
    return [this](uint64_t offset, size_t length, char* dst) {
      std::lock_guard lock(mu);
      if (reads.size() >= limit) return error;
      EXPECT_LE(offset + length, Data().size());
      reads.emplace_back(offset, length);
      bytes += length;
      std::memcpy(dst, Data().data() + offset, length);
      return 0;
    };
  }
};

std::string_view Slice(uint64_t offset, uint64_t length) {
  return std::string_view(Data()).substr(offset, length);
}

// Observes [0, length) front to back with read sizes taken in turn from `sizes`.
void ObserveSequentially(FooterCrc& crc, uint64_t length, const std::vector<uint64_t>& sizes) {
  uint64_t offset = 0;
  for (size_t i = 0; offset < length; ++i) {
    uint64_t n = std::min(sizes[i % sizes.size()], length - offset);
    crc.Observe(offset, Slice(offset, n));
    offset += n;
  }
}

// 0, step, 2 step... below length.
std::vector<uint64_t> Offsets(uint64_t length, uint64_t step) {
  std::vector<uint64_t> offsets;
  for (uint64_t at = 0; at < length; at += step) offsets.push_back(at);
  return offsets;
}

const uint64_t kSizes[] = {0, 1, 4 * kMiB - 1, 4 * kMiB, 4 * kMiB + 1, 13 * kMiB};

class FooterCrcSizes : public ::testing::TestWithParam<uint64_t> {};

TEST_P(FooterCrcSizes, SequentialObserveNeedsNoComputeRead) {
  const uint64_t length = GetParam();
  const std::vector<std::vector<uint64_t>> patterns = {
      {4096}, {1, 7, 4093, 65536, kMiB + 3}, {length ? length : 1}, {3 * kMiB + 1}, {131072}};
  for (const auto& pattern : patterns) {
    SCOPED_TRACE(pattern.size() == 1 ? pattern[0] : 0);
    FooterCrc crc(length);
    ObserveSequentially(crc, length, pattern);
    EXPECT_EQ(crc.ObservedBytes(), length);
    RecordingReader reader;
    uint32_t value = 0;
    ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
    EXPECT_EQ(value, Reference(length));
    EXPECT_EQ(reader.bytes, 0u) << "Compute re-read bytes that were all observed";
    ASSERT_TRUE(crc.Known().has_value());
    EXPECT_EQ(*crc.Known(), Reference(length));
    EXPECT_EQ(crc.ObservedBytes(), length);
  }
}

TEST_P(FooterCrcSizes, ComputeWithNothingObservedReadsEverythingOnce) {
  const uint64_t length = GetParam();
  FooterCrc crc(length);
  RecordingReader reader;
  uint32_t value = 0;
  ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(reader.bytes, length);
  // The requested ranges tile [0, length) exactly.
  std::sort(reader.reads.begin(), reader.reads.end());
  uint64_t cursor = 0;
  for (const auto& [offset, n] : reader.reads) {
    EXPECT_EQ(offset, cursor);
    cursor += n;
  }
  EXPECT_EQ(cursor, length);
  // The result is kept: a second Compute reads nothing.
  RecordingReader again;
  ASSERT_EQ(crc.Compute(again.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(again.bytes, 0u);
}

TEST_P(FooterCrcSizes, KnownWithoutComputeAfterFullSequentialObserve) {
  const uint64_t length = GetParam();
  FooterCrc crc(length);
  ObserveSequentially(crc, length, {65536});
  ASSERT_TRUE(crc.Known().has_value());
  EXPECT_EQ(*crc.Known(), Reference(length));
}

INSTANTIATE_TEST_SUITE_P(FooterCrc, FooterCrcSizes, ::testing::ValuesIn(kSizes),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return "Bytes" + std::to_string(info.param);
                         });

TEST(FooterCrc, EmptyFileIsKnownAtOnce) {
  FooterCrc crc(0);
  ASSERT_TRUE(crc.Known().has_value());
  EXPECT_EQ(*crc.Known(), 0u);
  crc.Observe(0, "abc");  // beyond the covered length: ignored
  EXPECT_EQ(*crc.Known(), 0u);
}

TEST(FooterCrc, WholeBlocksInRandomOrderThenComputeReadsOnlyTheMissingBlock) {
  const uint64_t length = 13 * kMiB;  // blocks of 4, 4, 4 and 1 MiB
  FooterCrc crc(length);
  for (uint64_t block : {2, 0, 3}) {
    uint64_t start = block * kBlock;
    crc.Observe(start, Slice(start, std::min(kBlock, length - start)));
  }
  EXPECT_EQ(crc.ObservedBytes(), 9 * kMiB);
  EXPECT_FALSE(crc.Known().has_value());
  RecordingReader reader;
  uint32_t value = 0;
  ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(reader.bytes, 4 * kMiB);
  for (const auto& [offset, n] : reader.reads) {
    EXPECT_GE(offset, kBlock);
    EXPECT_LE(offset + n, 2 * kBlock);
  }
}

// A file of 1.4 TB (326k blocks, allocated a page at a time as they are touched): reads at its
// start, in the middle and in its last, partial block are all counted, and nothing is known yet.
TEST(FooterCrc, HugeFileCountsWhatWasObservedAnywhere) {
  const uint64_t length = 1'368'990'378'948;
  FooterCrc crc(length);
  const std::string bytes = Data().substr(0, 3 * kMiB);
  crc.Observe(0, bytes);
  crc.Observe(length / 2, bytes);
  crc.Observe(length - kMiB, std::string_view(bytes).substr(0, kMiB));
  crc.Observe(length - 10, bytes);  // only 10 bytes are inside the covered length
  EXPECT_EQ(crc.ObservedBytes(), 3 * kMiB + 3 * kMiB + kMiB);
  EXPECT_FALSE(crc.Known().has_value());
}

TEST(FooterCrc, KnownPrefixesAndPiecesAreNotReadAgain) {
  const uint64_t length = 13 * kMiB;
  FooterCrc crc(length);
  crc.Observe(0, Slice(0, kMiB + 5));            // block 0: a prefix
  crc.Observe(kBlock, Slice(kBlock, 3));         // block 1: 3 bytes
  crc.Observe(3 * kBlock, Slice(3 * kBlock, kMiB));  // block 3: all of it
  // A read in the middle of block 2 cannot extend its (empty) prefix: it is kept for later.
  crc.Observe(2 * kBlock + 100, Slice(2 * kBlock + 100, 1000));
  const uint64_t observed = kMiB + 5 + 3 + kMiB + 1000;
  EXPECT_EQ(crc.ObservedBytes(), observed);
  RecordingReader reader;
  uint32_t value = 0;
  ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(reader.bytes, length - observed);
  // Nothing inside the known prefixes was requested.
  const std::pair<uint64_t, uint64_t> known[] = {
      {0, kMiB + 5}, {kBlock, kBlock + 3}, {2 * kBlock + 100, 2 * kBlock + 1100},
      {3 * kBlock, 3 * kBlock + kMiB}};
  for (const auto& [offset, n] : reader.reads) {
    for (const auto& [from, to] : known) {
      EXPECT_TRUE(offset + n <= from || offset >= to)
          << "read [" << offset << "," << offset + n << ") overlaps known [" << from << "," << to
          << ")";
    }
  }
}

TEST(FooterCrc, RandomOrderChunksComputeReadsExactlyWhatIsUnknown) {
  const uint64_t length = 13 * kMiB + 12345;
  const uint64_t chunk = 64 * 1024;
  std::vector<uint64_t> offsets = Offsets(length, chunk);
  std::mt19937_64 rng(42);
  for (int round = 0; round < 3; ++round) {
    std::shuffle(offsets.begin(), offsets.end(), rng);
    FooterCrc crc(length);
    size_t observe = offsets.size() * (round + 1) / 4;
    for (size_t i = 0; i < observe; ++i) {
      crc.Observe(offsets[i], Slice(offsets[i], std::min(chunk, length - offsets[i])));
    }
    uint64_t before = crc.ObservedBytes();
    EXPECT_LE(before, length);
    RecordingReader reader;
    uint32_t value = 0;
    ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
    EXPECT_EQ(value, Reference(length)) << "round " << round;
    EXPECT_EQ(reader.bytes, length - before) << "round " << round;
  }
}

TEST(FooterCrc, OverlappingRereads) {
  const uint64_t length = 5 * kMiB;
  FooterCrc crc(length);
  crc.Observe(0, Slice(0, 100));
  crc.Observe(50, Slice(50, 150));
  crc.Observe(0, Slice(0, 300));
  crc.Observe(150, Slice(150, 10));
  crc.Observe(0, Slice(0, 300));
  EXPECT_EQ(crc.ObservedBytes(), 300u);
  crc.Observe(299, Slice(299, 2));
  EXPECT_EQ(crc.ObservedBytes(), 301u);
  // Across the block boundary while block 0 is incomplete: block 0 keeps its last 10 bytes as
  // a piece ahead of its prefix, block 1 gets its prefix.
  crc.Observe(kBlock - 10, Slice(kBlock - 10, 20));
  EXPECT_EQ(crc.ObservedBytes(), 301u + 20);
  crc.Observe(kBlock - 10, Slice(kBlock - 10, 20));
  EXPECT_EQ(crc.ObservedBytes(), 301u + 20);
  crc.Observe(kBlock - 15, Slice(kBlock - 15, 10));  // overlaps that piece: not kept
  EXPECT_EQ(crc.ObservedBytes(), 301u + 20);
  crc.Observe(0, Slice(0, kBlock + 5));  // block 0 completes; block 1 already has 10
  EXPECT_EQ(crc.ObservedBytes(), kBlock + 10);
  // Bytes past the covered length are ignored even when they are garbage; the 5 valid ones
  // before them are kept.
  std::string tail = std::string(Slice(length - 5, 5)) + "garbage";
  crc.Observe(length - 5, tail);
  crc.Observe(length + 10, "more garbage");
  EXPECT_EQ(crc.ObservedBytes(), kBlock + 15);
  RecordingReader reader;
  uint32_t value = 0;
  ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(reader.bytes, length - (kBlock + 15));
}

// Two threads serving the kernel's readahead answer neighbouring requests out of order: the
// CRC is still known at the end without reading anything again.
TEST(FooterCrc, RequestsObservedOutOfOrderNeedNoComputeRead) {
  const uint64_t length = 13 * kMiB + 777;
  const uint64_t request = 128 * 1024;
  std::vector<uint64_t> offsets = Offsets(length, request);
  std::mt19937_64 rng(7);
  // Shuffled within windows of 8 requests, like readahead handed to several threads.
  for (size_t at = 0; at < offsets.size(); at += 8) {
    std::shuffle(offsets.begin() + at, offsets.begin() + std::min(offsets.size(), at + 8), rng);
  }
  FooterCrc crc(length);
  for (uint64_t at : offsets) crc.Observe(at, Slice(at, std::min(request, length - at)));
  ASSERT_TRUE(crc.Known().has_value());
  EXPECT_EQ(*crc.Known(), Reference(length));
  EXPECT_EQ(crc.ObservedBytes(), length);
}

TEST(FooterCrc, CancellationReturnsEintrAndLaterComputeResumes) {
  const uint64_t length = 13 * kMiB;
  FooterCrc crc(length);
  crc.Observe(0, Slice(0, 2 * kMiB));
  int polls = 0;
  RecordingReader first;
  uint32_t value = 0;
  EXPECT_EQ(crc.Compute(first.Reader(), [&] { return ++polls > 3; }, &value), EINTR);
  EXPECT_FALSE(crc.Known().has_value());
  EXPECT_GT(first.bytes, 0u);
  EXPECT_EQ(crc.ObservedBytes(), 2 * kMiB + first.bytes);  // progress kept

  // Cancelled before any read.
  RecordingReader none;
  EXPECT_EQ(crc.Compute(none.Reader(), [] { return true; }, &value), EINTR);
  EXPECT_EQ(none.bytes, 0u);

  RecordingReader second;
  ASSERT_EQ(crc.Compute(second.Reader(), [] { return false; }, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(first.bytes + second.bytes, length - 2 * kMiB) << "bytes were read twice";
}

TEST(FooterCrc, ReadErrorIsReturnedAndLaterComputeSucceeds) {
  const uint64_t length = 6 * kMiB;
  FooterCrc crc(length);
  RecordingReader failing;
  failing.limit = 2;
  failing.error = EIO;
  uint32_t value = 0;
  EXPECT_EQ(crc.Compute(failing.Reader(), {}, &value), EIO);
  EXPECT_FALSE(crc.Known().has_value());
  RecordingReader good;
  ASSERT_EQ(crc.Compute(good.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(failing.bytes + good.bytes, length);
}

TEST(FooterCrc, EightThreadsObservingTheWholeFileConcurrently) {
  const uint64_t length = 13 * kMiB + 7;
  FooterCrc crc(length);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { ObserveSequentially(crc, length, {4096u * (t + 1) + t}); });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(crc.ObservedBytes(), length);
  RecordingReader reader;
  uint32_t value = 0;
  ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
  EXPECT_EQ(value, Reference(length));
  EXPECT_EQ(reader.bytes, 0u);
}

TEST(FooterCrc, EightThreadsObservingInterleavedChunks) {
  const uint64_t length = 13 * kMiB;
  const uint64_t chunk = 256 * 1024;
  for (int round = 0; round < 3; ++round) {
    FooterCrc crc(length);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t at = t * chunk; at < length; at += 8 * chunk) {
          crc.Observe(at, Slice(at, std::min(chunk, length - at)));
        }
      });
    }
    for (auto& thread : threads) thread.join();
    uint64_t before = crc.ObservedBytes();
    RecordingReader reader;
    uint32_t value = 0;
    ASSERT_EQ(crc.Compute(reader.Reader(), {}, &value), 0);
    EXPECT_EQ(value, Reference(length));
    EXPECT_EQ(reader.bytes, length - before);
  }
}

TEST(FooterCrc, ConcurrentComputesAgree) {
  const uint64_t length = 9 * kMiB + 3;
  FooterCrc crc(length);
  crc.Observe(0, Slice(0, kMiB));
  RecordingReader reader;
  std::vector<uint32_t> values(8, 0);
  std::vector<int> results(8, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { results[t] = crc.Compute(reader.Reader(), {}, &values[t]); });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(results[t], 0);
    EXPECT_EQ(values[t], Reference(length));
  }
  EXPECT_EQ(reader.bytes, length - kMiB) << "concurrent computes read bytes twice";
}

// An Observe whose CRC is in flight when Compute finishes: Compute clears the block table,
// then Extend re-locks and writes into blocks_[index] of the now empty vector.
TEST(FooterCrcRegression, ObserveRacingTheEndOfComputeDoesNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const uint64_t length = kMiB;
        const uint32_t expected = Reference(length);
        for (int iteration = 0; iteration < 2000; ++iteration) {
          FooterCrc crc(length);
          std::atomic<int> ready{0};
          std::thread observer([&] {
            ready++;
            while (ready.load() < 2) {
            }
            crc.Observe(0, Slice(0, length));
          });
          ready++;
          while (ready.load() < 2) {
          }
          RecordingReader reader;
          uint32_t value = 0;
          int err = crc.Compute(reader.Reader(), {}, &value);
          observer.join();
          if (err != 0 || value != expected) std::_Exit(2);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace aprfs
