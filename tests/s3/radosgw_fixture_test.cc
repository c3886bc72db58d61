// The radosgw fixture itself, checked with curl only: what the S3 tests rely on (exact bytes,
// ranges, signatures, permissions, anonymous access, listing, a gateway that stops and comes
// back) really holds on this Ceph.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/s3/radosgw.h"

namespace aprfs::testing {
namespace {

namespace fs = std::filesystem;

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(random() & 0xFF);
  return bytes;
}

class RadosGwFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "aprfs-s3-fixture-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    scratch_ = pattern;
    try {
      gw_ = &RadosGw::Shared();
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
  }
  void TearDown() override {
    std::error_code ec;
    if (!scratch_.empty()) fs::remove_all(scratch_, ec);
  }

  RadosGw& gw() { return *gw_; }

  // Writes scratch/relative (folders created) and returns its path.
  std::string WriteLocal(const std::string& relative, const std::string& bytes) {
    fs::path path = fs::path(scratch_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    EXPECT_TRUE(out.good()) << path;
    return path.string();
  }

  const std::string& scratch() const { return scratch_; }

 private:
  std::string scratch_;
  RadosGw* gw_ = nullptr;
};

// Several MB through PutFile and back through GetObject, byte for byte, under a key with
// spaces, '+', unicode and sub-delimiters: the server stores the key as given (encoded once).
TEST_F(RadosGwFixtureTest, PutFileAndGetObjectKeepExactBytesUnderAKeyThatNeedsEncoding) {
  const std::string bucket = "fixture-bytes";
  const std::string key = "models/a b+c/ünï€ (1)!'*=&;$,@:.safetensors";
  const std::string bytes = RandomBytes((3u << 20) + 12345, 1);
  gw().CreateBucket(bucket);
  gw().PutFile(bucket, key, WriteLocal("big.bin", bytes));

  std::string got = gw().GetObject(bucket, key);
  ASSERT_EQ(got.size(), bytes.size());
  EXPECT_TRUE(got == bytes) << "the object's bytes differ from the file's";
  EXPECT_EQ(gw().ListKeys(bucket, "models/"), std::vector<std::string>{key});

  gw().PutBytes(bucket, "empty", "");
  EXPECT_EQ(gw().GetObject(bucket, "empty"), "");
  gw().PutBytes(bucket, "small/text.json", "{\"a\": 1}\n");
  EXPECT_EQ(gw().GetObject(bucket, "small/text.json"), "{\"a\": 1}\n");
}

TEST_F(RadosGwFixtureTest, RangedGetAnswers206WithTheExactSlice) {
  const std::string bucket = "fixture-ranges";
  const std::string bytes = RandomBytes((1u << 20) + 7, 2);
  gw().CreateBucket(bucket);
  gw().PutBytes(bucket, "shard.bin", bytes);
  const std::string url = gw().Url(bucket, "shard.bin");

  CurlResult middle = gw().Curl(url, RadosGw::Tester(), {"-r", "1000-65999"});
  ASSERT_EQ(middle.curl_exit, 0) << middle.Describe();
  EXPECT_EQ(middle.status, 206) << middle.Describe();
  EXPECT_TRUE(middle.body == bytes.substr(1000, 65000)) << "slice differs, " << middle.body.size();
  EXPECT_NE(middle.headers.find("bytes 1000-65999/" + std::to_string(bytes.size())),
            std::string::npos)
      << middle.headers;

  CurlResult tail = gw().Curl(url, RadosGw::Tester(), {"-r", "1048000-"});
  EXPECT_EQ(tail.status, 206) << tail.Describe();
  EXPECT_TRUE(tail.body == bytes.substr(1048000)) << "tail differs, " << tail.body.size();

  CurlResult past = gw().Curl(url, RadosGw::Tester(), {"-r", "5000000-5000010"});
  EXPECT_EQ(past.status, 416) << past.Describe();
}

TEST_F(RadosGwFixtureTest, WrongSecretIsRefusedWith403SignatureDoesNotMatch) {
  const std::string bucket = "fixture-signature";
  gw().CreateBucket(bucket);
  gw().PutBytes(bucket, "object", "payload");

  CurlResult wrong =
      gw().Curl(gw().Url(bucket, "object"), {RadosGw::AccessKey(), "NOT-THE-SECRET"});
  EXPECT_EQ(wrong.status, 403) << wrong.Describe();
  EXPECT_NE(wrong.body.find("SignatureDoesNotMatch"), std::string::npos) << wrong.Describe();

  CurlResult unknown = gw().Curl(gw().Url(bucket, "object"), {"NOSUCHKEY", "whatever"});
  EXPECT_EQ(unknown.status, 403) << unknown.Describe();
  EXPECT_NE(unknown.body.find("InvalidAccessKeyId"), std::string::npos) << unknown.Describe();

  EXPECT_EQ(gw().GetObject(bucket, "object"), "payload");
}

TEST_F(RadosGwFixtureTest, OtherUserGets403AccessDeniedOnTestersPrivateBucket) {
  const std::string bucket = "fixture-private";
  gw().CreateBucket(bucket);
  gw().PutBytes(bucket, "secret.bin", "tester's");

  CurlResult get = gw().Curl(gw().Url(bucket, "secret.bin"), RadosGw::Other());
  EXPECT_EQ(get.status, 403) << get.Describe();
  EXPECT_NE(get.body.find("AccessDenied"), std::string::npos) << get.Describe();

  CurlResult list = gw().Curl(gw().Url(bucket, "", "list-type=2"), RadosGw::Other());
  EXPECT_EQ(list.status, 403) << list.Describe();
  EXPECT_NE(list.body.find("AccessDenied"), std::string::npos) << list.Describe();

  CurlResult ranged = gw().Curl(gw().Url(bucket, "secret.bin"), RadosGw::Other(), {"-r", "0-3"});
  EXPECT_EQ(ranged.status, 403) << ranged.Describe();

  EXPECT_EQ(gw().GetObject(bucket, "secret.bin"), "tester's");
}

TEST_F(RadosGwFixtureTest, AnonymousReadsAPublicBucketButNotAPrivateOne) {
  const std::string open_bucket = "fixture-public";
  const std::string closed_bucket = "fixture-closed";
  const std::string bytes = RandomBytes(100000, 3);
  gw().CreateBucket(open_bucket, /*public_read=*/true);
  gw().CreateBucket(closed_bucket);
  gw().PutBytes(open_bucket, "dir/model.safetensors", bytes);  // no per-object ACL
  gw().PutBytes(closed_bucket, "dir/model.safetensors", bytes);

  CurlResult get = gw().Curl(gw().Url(open_bucket, "dir/model.safetensors"), RadosGw::Anonymous());
  EXPECT_EQ(get.status, 200) << get.Describe();
  EXPECT_TRUE(get.body == bytes) << "anonymous GET returned other bytes, " << get.body.size();
  CurlResult range = gw().Curl(gw().Url(open_bucket, "dir/model.safetensors"), RadosGw::Anonymous(),
                               {"-r", "10-19"});
  EXPECT_EQ(range.status, 206) << range.Describe();
  EXPECT_EQ(range.body, bytes.substr(10, 10));
  CurlResult list =
      gw().Curl(gw().Url(open_bucket, "", "list-type=2&prefix=dir%2F"), RadosGw::Anonymous());
  EXPECT_EQ(list.status, 200) << list.Describe();
  EXPECT_NE(list.body.find("<Key>dir/model.safetensors</Key>"), std::string::npos)
      << list.Describe();

  CurlResult closed_get =
      gw().Curl(gw().Url(closed_bucket, "dir/model.safetensors"), RadosGw::Anonymous());
  EXPECT_EQ(closed_get.status, 403) << closed_get.Describe();
  EXPECT_NE(closed_get.body.find("AccessDenied"), std::string::npos) << closed_get.Describe();
  CurlResult closed_list =
      gw().Curl(gw().Url(closed_bucket, "", "list-type=2"), RadosGw::Anonymous());
  EXPECT_EQ(closed_list.status, 403) << closed_list.Describe();
}

TEST_F(RadosGwFixtureTest, ListObjectsV2OfAPrefixListsTheUploadedKeys) {
  const std::string bucket = "fixture-list";
  gw().CreateBucket(bucket);
  WriteLocal("tree/config.json", "{}");
  WriteLocal("tree/model-00001-of-00002.safetensors", RandomBytes(5000, 4));
  WriteLocal("tree/sub/deeper/a b+c.bin", "x");
  WriteLocal("tree/ünicode/€.txt", "y");
  std::vector<std::string> uploaded = gw().UploadFolder(bucket, "org/model/", scratch() + "/tree");
  const std::vector<std::string> expected = {
      "org/model/config.json", "org/model/model-00001-of-00002.safetensors",
      "org/model/sub/deeper/a b+c.bin", "org/model/ünicode/€.txt"};
  EXPECT_EQ(uploaded, expected);
  gw().PutBytes(bucket, "org/model-other/x", "outside");
  gw().PutBytes(bucket, "org/modelx", "outside");
  gw().PutBytes(bucket, "top", "outside");

  EXPECT_EQ(gw().ListKeys(bucket, "org/model/"), expected);
  EXPECT_EQ(gw().ListKeys(bucket).size(), expected.size() + 3);
  EXPECT_EQ(gw().GetObject(bucket, "org/model/sub/deeper/a b+c.bin"), "x");

  // The raw request, as the brief's curl does it: query sorted and percent-encoded.
  CurlResult raw =
      gw().Curl(gw().Url(bucket, "", "list-type=2&prefix=org%2Fmodel%2F"), RadosGw::Tester());
  EXPECT_EQ(raw.status, 200) << raw.Describe();
  EXPECT_NE(raw.body.find("<KeyCount>4</KeyCount>"), std::string::npos) << raw.Describe();
}

TEST_F(RadosGwFixtureTest, DeleteObjectRemovesIt) {
  const std::string bucket = "fixture-delete";
  gw().CreateBucket(bucket);
  gw().PutBytes(bucket, "gone soon", "bytes");
  gw().DeleteObject(bucket, "gone soon");
  CurlResult get = gw().Curl(gw().Url(bucket, "gone soon"), RadosGw::Tester());
  EXPECT_EQ(get.status, 404) << get.Describe();
  EXPECT_NE(get.body.find("NoSuchKey"), std::string::npos) << get.Describe();
  EXPECT_TRUE(gw().ListKeys(bucket).empty());
}

TEST_F(RadosGwFixtureTest, StoppedGatewayRefusesConnectionsAndComesBackWithTheSameObjects) {
  const std::string bucket = "fixture-restart";
  const std::string bytes = RandomBytes((2u << 20) + 1, 5);
  gw().CreateBucket(bucket, /*public_read=*/true);
  gw().PutBytes(bucket, "kept/shard.bin", bytes);

  gw().StopGateway();
  EXPECT_TRUE(gw().GatewayStopped());
  CurlResult refused = gw().Curl(gw().Url(bucket, "kept/shard.bin"), RadosGw::Tester());
  EXPECT_EQ(refused.curl_exit, 7) << refused.Describe();
  EXPECT_EQ(refused.status, 0) << refused.Describe();

  gw().StartGateway();
  EXPECT_FALSE(gw().GatewayStopped());
  std::string got = gw().GetObject(bucket, "kept/shard.bin");
  EXPECT_TRUE(got == bytes) << "after the restart the object has other bytes, " << got.size();
  EXPECT_EQ(gw().ListKeys(bucket, "kept/"), std::vector<std::string>{"kept/shard.bin"});
  CurlResult anonymous =
      gw().Curl(gw().Url(bucket, "kept/shard.bin"), RadosGw::Anonymous(), {"-r", "0-15"});
  EXPECT_EQ(anonymous.status, 206) << anonymous.Describe();  // the bucket policy survived too
}

}  // namespace
}  // namespace aprfs::testing
