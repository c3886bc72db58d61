// VerifyAndPublish (fetch/remote_model.h) on a complete chunk store, no network: a file whose
// sha256 differs loses every chunk; one whose chunks are evicted while it is hashed (a small
// --cache-size, a full disk) is not called a mismatch and keeps the chunks it still has.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "fetch/hub_origin.h"
#include "fetch/remote_model.h"
#include "fetch/sha256.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using testing::PseudoRandomBytes;
using testing::TempDir;

class VerifyAndPublishTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
    RemoteSettings settings;
    settings.cache_dir = dir_.path();
    context_ = std::make_unique<RemoteContext>(HubConfig{}, settings);
  }
  void TearDown() override { spdlog::set_level(log_level_); }

  // A complete store of `content` whose expected sha256 is `sha256`.
  std::shared_ptr<RemoteFile> CompleteFile(const std::string& content, const std::string& sha256) {
    auto store = context_->chunks().Store(sha256, content.size());
    for (uint64_t chunk = 0; chunk < store->chunk_count(); ++chunk) {
      auto claim = store->TryClaim(chunk);
      const uint64_t begin = store->ChunkBegin(chunk);
      EXPECT_EQ(store->Write(*claim, begin,
                             std::string_view(content).substr(begin, store->ChunkLength(chunk))),
                0);
      EXPECT_EQ(store->Commit(*claim), 0);
    }
    const std::string commit(40, 'c');
    RemoteBlob blob = HubBlob("org/model", commit, "model.safetensors", content.size(), sha256);
    auto origin = std::make_unique<HubOrigin>(context_->hub(), "org/model", commit,
                                              "model.safetensors", sha256);
    return std::make_shared<RemoteFile>(blob, std::move(origin), store, context_->chunks(),
                                        context_->fetcher(), RemoteOptions{});
  }

  TempDir dir_;
  std::unique_ptr<RemoteContext> context_;
  spdlog::level::level_enum log_level_ = spdlog::level::info;
};

const uint64_t kSize = 2 * ChunkCache::kChunkSize + 12345;  // three chunks

TEST_F(VerifyAndPublishTest, AGoodFileIsVerified) {
  const std::string content = PseudoRandomBytes(kSize, 1);
  auto file = CompleteFile(content, Sha256Hex(content));
  VerifyResult result = VerifyAndPublish(*context_, *file, std::nullopt);
  EXPECT_EQ(result.verdict, VerifyResult::Verdict::Good) << result.message;
  EXPECT_TRUE(file->store().Complete());
}

TEST_F(VerifyAndPublishTest, AMismatchDropsEveryChunk) {
  const std::string content = PseudoRandomBytes(kSize, 2);
  auto file = CompleteFile(content, Sha256Hex(content + "x"));
  VerifyResult result = VerifyAndPublish(*context_, *file, std::nullopt);
  EXPECT_EQ(result.verdict, VerifyResult::Verdict::Mismatch) << result.message;
  EXPECT_EQ(file->store().PresentCount(), 0u);
}

TEST_F(VerifyAndPublishTest, ChunksEvictedWhileHashingAreNoMismatch) {
  const std::string content = PseudoRandomBytes(kSize, 3);
  auto file = CompleteFile(content, Sha256Hex(content));
  HashCallbacks callbacks;
  bool evicted = false;
  callbacks.progress = [&](uint64_t, uint64_t) {
    if (!evicted) evicted = file->store().Evict(2);  // the hash reads its hole as zeros
  };
  VerifyResult result = VerifyAndPublish(*context_, *file, std::nullopt, callbacks);
  ASSERT_TRUE(evicted);
  EXPECT_EQ(result.verdict, VerifyResult::Verdict::Error) << result.message;
  EXPECT_NE(result.message.find("evicted"), std::string::npos) << result.message;
  EXPECT_TRUE(file->store().Present(0) && file->store().Present(1))
      << "the chunks still there were dropped as if the file were wrong";
}

}  // namespace
}  // namespace aprfs
