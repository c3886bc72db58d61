// VirtualFile over a model written to disk: every read equals a reference materialization of
// the plan; shards changed underneath fail with EIO, shards replaced by rename keep serving the
// version the plan was built from (design.md "Rules of the read path").
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fetch/local_model.h"
#include "format/views/model_import.h"
#include "fs/virtual_file.h"
#include "tests/support/materialize.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using testing::LlamaLikeModel;
using testing::MakeTensor;
using testing::TempDir;
using testing::TestModel;
using testing::WriteModel;

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A llama-like model with tied embeddings plus tensors whose sizes leave padding, an empty
// tensor and a scalar, over three shards, with unaligned safetensors headers.
TestModel PaddedModel() {
  TestModel model = LlamaLikeModel(2, 3, /*with_lm_head=*/false);
  model.shards[0].push_back(MakeTensor("odd.a", "U8", {37}));
  model.shards[1].insert(model.shards[1].begin(), MakeTensor("odd.b", "F16", {3, 7}));
  model.shards[1].push_back(MakeTensor("empty", "F32", {0}));
  model.shards[2].push_back(MakeTensor("scalar", "F32", {}));
  model.shards[2].push_back(MakeTensor("odd.c", "I8", {1001}));
  model.shard_layout.pad_header_to_8 = false;
  return model;
}

class VirtualFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);  // the EIO tests log on purpose
    WriteModel(dir_.path(), PaddedModel());
    Rebuild();
  }

  // Builds the plan and the file from what is on disk now.
  void Rebuild() {
    LoadedModel loaded = LoadLocalModel(dir_.path(), "padded", std::nullopt);
    ImportedModel imported = ImportShardSet(loaded.set);
    shard_files_.clear();
    std::vector<std::string> bytes;
    for (const Shard& shard : loaded.set.shards) {
      shard_files_.push_back(dir_ / shard.file);
      bytes.push_back(ReadFileBytes(dir_ / shard.file));
    }
    reference_ = testing::MaterializePlan(imported.plan, bytes);
    file_ = std::make_unique<VirtualFile>("padded.apr", imported.plan, loaded.sources);
    ASSERT_EQ(file_->size(), reference_.size());
  }

  // Reads through the VirtualFile; returns the bytes or the negative errno as text.
  std::string Get(uint64_t offset, size_t length, ssize_t* result = nullptr) {
    std::string out(length, '\x77');
    ssize_t n = file_->Read(offset, length, out.data());
    if (result) *result = n;
    if (n < 0) return "error " + std::to_string(n);
    out.resize(static_cast<size_t>(n));
    return out;
  }

  std::string Expected(uint64_t offset, size_t length) const {
    if (offset >= reference_.size()) return {};
    return reference_.substr(offset, length);
  }

  const FilePlan& plan() const { return file_->plan(); }

  // Extents of source `source` (shard index).
  std::vector<DataExtent> ExtentsOf(uint32_t source) const {
    std::vector<DataExtent> out;
    for (const DataExtent& e : plan().extents) {
      if (e.source == source) out.push_back(e);
    }
    return out;
  }

  void TearDown() override { spdlog::set_level(log_level_); }

  spdlog::level::level_enum log_level_ = spdlog::level::info;
  TempDir dir_;
  std::vector<std::string> shard_files_;
  std::string reference_;
  std::unique_ptr<VirtualFile> file_;
};

TEST_F(VirtualFileTest, WholeFileEqualsReference) {
  ASSERT_EQ(shard_files_.size(), 3u);
  ASSERT_GT(plan().extents.size(), 10u);
  EXPECT_TRUE(Get(0, reference_.size()) == reference_);
  EXPECT_TRUE(Get(0, reference_.size() + 1000) == reference_);  // clipped at EOF
  // The layout really has padding between payloads and an empty data tensor.
  bool padded = false;
  for (size_t i = 1; i < plan().extents.size(); ++i) {
    const DataExtent& prev = plan().extents[i - 1];
    padded = padded || prev.offset + prev.length < plan().extents[i].offset;
  }
  EXPECT_TRUE(padded);
}

TEST_F(VirtualFileTest, ByteByByteNearEveryBoundary) {
  std::set<uint64_t> boundaries = {0, 1, 40, 44, 63, 64, plan().data_offset, plan().footer_offset,
                                   plan().total_size};
  for (const DataExtent& e : plan().extents) {
    boundaries.insert(e.offset);
    boundaries.insert(e.offset + e.length);
    boundaries.insert((e.offset + e.length + 63) / 64 * 64);
  }
  for (uint64_t b : boundaries) {
    for (uint64_t off = b >= 5 ? b - 5 : 0; off < b + 5; ++off) {
      ASSERT_EQ(Get(off, 1), Expected(off, 1)) << "offset " << off;
      ASSERT_EQ(Get(off, 2), Expected(off, 2)) << "offset " << off;
      ASSERT_EQ(Get(off, 3), Expected(off, 3)) << "offset " << off;
    }
  }
}

TEST_F(VirtualFileTest, RandomOffsetsAndLengths) {
  std::mt19937_64 rng(7);
  const uint64_t size = reference_.size();
  for (int i = 0; i < 3000; ++i) {
    uint64_t offset = rng() % (size + 200);
    size_t length = 0;
    switch (rng() % 4) {
      case 0: length = rng() % 10; break;
      case 1: length = rng() % 200; break;
      case 2: length = rng() % 5000; break;
      default: length = rng() % (size + 100); break;
    }
    ssize_t n = 0;
    std::string got = Get(offset, length, &n);
    std::string want = Expected(offset, length);
    ASSERT_EQ(n, static_cast<ssize_t>(want.size())) << offset << "+" << length;
    ASSERT_TRUE(got == want) << offset << "+" << length;
  }
}

TEST_F(VirtualFileTest, ReadSpanningPrefixDataPaddingAndFooter) {
  uint64_t from = plan().data_offset - 10;
  uint64_t to = plan().total_size;
  EXPECT_TRUE(Get(from, to - from) == Expected(from, to - from));
  EXPECT_TRUE(Get(30, plan().data_offset) == Expected(30, plan().data_offset));
  // From inside one payload, across its padding, into the next payload.
  const DataExtent& a = plan().extents[3];
  const DataExtent& b = plan().extents[4];
  uint64_t start = a.offset + a.length / 2;
  EXPECT_TRUE(Get(start, b.offset + 5 - start) == Expected(start, b.offset + 5 - start));
}

TEST_F(VirtualFileTest, PastEndOfFileAndClipping) {
  const uint64_t size = reference_.size();
  ssize_t n = 99;
  EXPECT_EQ(Get(size, 10, &n), "");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Get(size + 12345, 10, &n), "");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Get(~uint64_t{0} - 3, 100, &n), "");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Get(size - 2, 100, &n), reference_.substr(size - 2));
  EXPECT_EQ(n, 2);
  EXPECT_EQ(Get(0, 0, &n), "");
  EXPECT_EQ(n, 0);
  // A huge length is clipped before anything is written past the end of the file.
  char buffer[16];
  std::memset(buffer, 'q', sizeof(buffer));
  EXPECT_EQ(file_->Read(size - 4, SIZE_MAX / 2, buffer), 4);
  EXPECT_EQ(std::string(buffer, 4), reference_.substr(size - 4));
  EXPECT_EQ(buffer[4], 'q');
}

TEST_F(VirtualFileTest, FooterIsCrcOfEverythingBefore) {
  const uint64_t footer = plan().footer_offset;
  uint32_t want = testing::ZlibCrc32(std::string_view(reference_).substr(0, footer));
  std::string bytes = Get(footer, 4);  // footer first: nothing observed yet
  ASSERT_EQ(bytes.size(), 4u);
  uint32_t got = 0;
  for (int i = 3; i >= 0; --i) got = got << 8 | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(got, want);
  EXPECT_EQ(Get(footer + 1, 2), bytes.substr(1, 2));
  EXPECT_EQ(Get(footer + 3, 10), bytes.substr(3));
}

TEST_F(VirtualFileTest, SequentialReadKnowsTheFooterBeforeReadingIt) {
  const uint64_t footer = plan().footer_offset;
  for (uint64_t at = 0; at < footer; at += 4096) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(4096, footer - at));
    ASSERT_TRUE(Get(at, n) == Expected(at, n));
  }
  EXPECT_EQ(file_->footer_crc().ObservedBytes(), footer);
  // The footer comes out right even if every shard vanished meanwhile: nothing is re-read.
  for (const std::string& shard : shard_files_) fs::resize_file(shard, 0);
  EXPECT_EQ(Get(footer, 4), Expected(footer, 4));
}

TEST_F(VirtualFileTest, FooterReadCanBeCancelled) {
  std::string out(4, '\0');
  ssize_t n = file_->Read(plan().footer_offset, 4, out.data(), {[] { return true; }});
  EXPECT_EQ(n, -EINTR);
  EXPECT_EQ(Get(plan().footer_offset, 4), Expected(plan().footer_offset, 4));
}

TEST_F(VirtualFileTest, TruncatedShardFailsWithEioOthersStillRead) {
  const uint32_t victim = 1;
  std::vector<DataExtent> victim_extents = ExtentsOf(victim);
  ASSERT_FALSE(victim_extents.empty());
  fs::resize_file(shard_files_[victim], fs::file_size(shard_files_[victim]) / 2);
  ssize_t n = 0;
  for (const DataExtent& e : victim_extents) {
    Get(e.offset, e.length, &n);
    EXPECT_EQ(n, -EIO) << "extent at " << e.offset;
    // Any read touching it, even one byte of it at the end of a larger read.
    Get(e.offset - 1, 2, &n);
    EXPECT_EQ(n, -EIO);
  }
  // Everything else still reads fine.
  for (uint32_t s : {0u, 2u}) {
    for (const DataExtent& e : ExtentsOf(s)) {
      EXPECT_TRUE(Get(e.offset, e.length) == Expected(e.offset, e.length)) << e.offset;
    }
  }
  EXPECT_TRUE(Get(0, plan().data_offset) == Expected(0, plan().data_offset));
  // The footer needs the victim's bytes.
  Get(plan().footer_offset, 4, &n);
  EXPECT_EQ(n, -EIO);
}

TEST_F(VirtualFileTest, ShardRewrittenInPlaceFailsWithEio) {
  const uint32_t victim = 2;
  const std::string& path = shard_files_[victim];
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  std::string other = ReadFileBytes(path);
  for (char& c : other) c = static_cast<char>(c ^ 0x5a);
  {
    std::ofstream out(path, std::ios::binary | std::ios::in | std::ios::out);  // same inode
    out.write(other.data(), static_cast<std::streamsize>(other.size()));
  }
  // Same size; make sure the modification time differs even on a coarse clock.
  timespec times[2] = {before.st_atim, before.st_mtim};
  times[1].tv_sec += 3;
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  ASSERT_EQ(after.st_size, before.st_size);
  ssize_t n = 0;
  for (const DataExtent& e : ExtentsOf(victim)) {
    std::string got = Get(e.offset, e.length, &n);
    EXPECT_EQ(n, -EIO) << "served bytes of a changed shard at " << e.offset;
  }
  for (const DataExtent& e : ExtentsOf(0)) {
    EXPECT_TRUE(Get(e.offset, e.length) == Expected(e.offset, e.length)) << e.offset;
  }
}

TEST_F(VirtualFileTest, ShardGrownInPlaceFailsWithEio) {
  const uint32_t victim = 0;
  {
    std::ofstream out(shard_files_[victim], std::ios::binary | std::ios::app);
    out << "appended";
  }
  ssize_t n = 0;
  for (const DataExtent& e : ExtentsOf(victim)) {
    Get(e.offset, e.length, &n);
    EXPECT_EQ(n, -EIO) << e.offset;
  }
}

TEST_F(VirtualFileTest, ShardReplacedByRenameKeepsServingOldBytes) {
  for (size_t s = 0; s < shard_files_.size(); ++s) {
    std::string other = ReadFileBytes(shard_files_[s]);
    for (char& c : other) c = static_cast<char>(~c);
    std::string tmp = shard_files_[s] + ".tmp";
    testing::WriteFile(tmp, other + "different size");
    fs::rename(tmp, shard_files_[s]);
  }
  EXPECT_TRUE(Get(0, reference_.size()) == reference_);
  EXPECT_EQ(Get(plan().footer_offset, 4), Expected(plan().footer_offset, 4));
  // A deleted shard too: the open descriptor still reads the old inode.
  fs::remove(shard_files_[0]);
  for (const DataExtent& e : ExtentsOf(0)) {
    EXPECT_TRUE(Get(e.offset, e.length) == Expected(e.offset, e.length));
  }
}

TEST_F(VirtualFileTest, ConcurrentReadersOfTheBody) {
  const uint64_t body = plan().footer_offset;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::string buffer;
      for (int i = 0; i < 400; ++i) {
        uint64_t offset = rng() % body;
        size_t length = static_cast<size_t>(std::min<uint64_t>(rng() % 9000, body - offset));
        buffer.assign(length, '\0');
        ssize_t n = file_->Read(offset, length, buffer.data());
        if (n != static_cast<ssize_t>(length) || buffer != reference_.substr(offset, length)) {
          mismatches++;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(Get(body, 4), Expected(body, 4));
}

// The FooterCrc race (see footer_crc_test.cc) through the public read path: one reader reads
// the end of the body while another reads the footer.
TEST(VirtualFileRegression, BodyReadRacingFooterReadDoesNotCrash) {
  TempDir dir;
  TestModel model;
  model.shards = {{MakeTensor("big", "U8", {3u << 20})}};
  WriteModel(dir.path(), model);
  LoadedModel loaded = LoadLocalModel(dir.path(), "big", std::nullopt);
  ImportedModel imported = ImportShardSet(loaded.set);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        for (int iteration = 0; iteration < 500; ++iteration) {
          VirtualFile file("big.apr", imported.plan, loaded.sources);
          const uint64_t body = file.plan().footer_offset;
          std::atomic<int> ready{0};
          std::thread reader([&] {
            std::string buffer(body, '\0');
            ready++;
            while (ready.load() < 2) {
            }
            if (file.Read(0, body, buffer.data()) != static_cast<ssize_t>(body)) std::_Exit(3);
          });
          ready++;
          while (ready.load() < 2) {
          }
          char footer[4];
          if (file.Read(body, 4, footer) != 4) std::_Exit(2);
          reader.join();
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace aprfs
