// Content hashes of HF cache blobs (fetch/sha256.h): known vectors, a file hashed in 4 MiB
// pieces against OpenSSL's one-shot digest, ranges, cancel, progress and errors.
#include "fetch/sha256.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using testing::PseudoRandomBytes;
using testing::TempDir;
using testing::WriteFile;

// The reference: OpenSSL's one-shot EVP_Digest, independent of the streaming code.
std::string OneShotSha256(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EXPECT_EQ(EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr), 1);
  std::string hex;
  char two[3];
  for (unsigned int i = 0; i < length; ++i) {
    snprintf(two, sizeof(two), "%02x", digest[i]);
    hex += two;
  }
  return hex;
}

class Sha256Test : public ::testing::Test {
 protected:
  // Writes `bytes` to a file and keeps it open for reading.
  int OpenWith(const std::string& bytes) {
    path_ = dir_ / "data.bin";
    WriteFile(path_, bytes);
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd_, 0);
    return fd_;
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
  }

  TempDir dir_;
  std::string path_;
  int fd_ = -1;
};

TEST_F(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  HashResult empty = Sha256OfRange(OpenWith(""), 0, 0, path_);
  ASSERT_TRUE(empty.ok()) << empty.error;
  EXPECT_EQ(empty.hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(Sha256Test, FileOfAbc) {
  HashResult abc = Sha256OfRange(OpenWith("abc"), 0, 3, path_);
  ASSERT_TRUE(abc.ok()) << abc.error;
  EXPECT_FALSE(abc.cancelled);
  EXPECT_EQ(abc.hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(Sha256Test, TenMiBFileMatchesOneShotAndReportsProgress) {
  std::string bytes = PseudoRandomBytes((10u << 20) + 12345, 7);  // not a multiple of 4 MiB
  int fd = OpenWith(bytes);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  HashCallbacks callbacks;
  callbacks.progress = [&](uint64_t hashed, uint64_t total) { progress.emplace_back(hashed, total); };
  HashResult result = Sha256OfRange(fd, 0, bytes.size(), path_, callbacks);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(result.hex, OneShotSha256(bytes));
  // 4 MiB + 4 MiB + the rest.
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress[0], std::make_pair(uint64_t{kHashReadSize}, uint64_t{bytes.size()}));
  EXPECT_EQ(progress[1].first, 2 * kHashReadSize);
  EXPECT_EQ(progress[2].first, bytes.size());
  // The descriptor's offset is untouched (pread).
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 0);
}

TEST_F(Sha256Test, RangeInTheMiddle) {
  std::string bytes = PseudoRandomBytes(5u << 20, 3);
  int fd = OpenWith(bytes);
  uint64_t offset = 1000003;
  uint64_t length = (4u << 20) + 17;
  HashResult result = Sha256OfRange(fd, offset, length, path_);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(result.hex, OneShotSha256(bytes.substr(offset, length)));
}

TEST_F(Sha256Test, CancelStopsBetweenReads) {
  std::string bytes = PseudoRandomBytes(9u << 20, 5);
  int fd = OpenWith(bytes);
  int polls = 0;
  HashCallbacks callbacks;
  callbacks.cancelled = [&] { return ++polls > 1; };  // let exactly one read through
  HashResult result = Sha256OfRange(fd, 0, bytes.size(), path_, callbacks);
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(result.cancelled);
  EXPECT_TRUE(result.hex.empty());
  EXPECT_NE(result.error.find(path_), std::string::npos) << result.error;
  EXPECT_EQ(polls, 2);
}

TEST_F(Sha256Test, RangePastTheEndIsAnError) {
  int fd = OpenWith("abc");
  HashResult result = Sha256OfRange(fd, 1, 10, path_);
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(result.cancelled);
  EXPECT_NE(result.error.find(path_), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("ends"), std::string::npos) << result.error;
}

TEST_F(Sha256Test, BadDescriptorIsAnError) {
  HashResult result = Sha256OfRange(-1, 0, 10, "nowhere");
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.error.find("nowhere"), std::string::npos) << result.error;
}

// Named Sha256* so the hash filter picks it up with the rest of this file.
TEST(Sha256GitBlobTest, KnownVectors) {
  // `printf 'hello\n' | git hash-object --stdin` and the empty blob.
  EXPECT_EQ(GitBlobSha1("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(GitBlobSha1(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  // Content with NUL bytes: the header is "blob 3" plus one NUL, then the content.
  std::string content("a\0b", 3);
  std::string framed = std::string("blob 3") + '\0' + content;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ASSERT_EQ(EVP_Digest(framed.data(), framed.size(), digest, &length, EVP_sha1(), nullptr), 1);
  std::string hex;
  char two[3];
  for (unsigned int i = 0; i < length; ++i) {
    snprintf(two, sizeof(two), "%02x", digest[i]);
    hex += two;
  }
  EXPECT_EQ(GitBlobSha1(content), hex);
}

}  // namespace
}  // namespace aprfs
