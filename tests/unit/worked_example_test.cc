// The spec's §12 worked example and the AF-gold golden model must come out of our writer byte
// for byte (apr-v2-format.md §12).
#include <gtest/gtest.h>

#include <cstring>

#include "format/apr/apr_metadata.h"
#include "format/apr/apr_plan.h"
#include "format/apr/crc32.h"
#include "tests/support/materialize.h"

namespace aprfs {
namespace {

std::string F32Bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  }
  return out;
}

std::string FromHexDump(const char* dump) {
  std::string bytes;
  for (const char* p = dump; *p;) {
    while (*p == ' ' || *p == '\n') ++p;
    if (!*p) break;
    auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    bytes += static_cast<char>(nibble(p[0]) << 4 | nibble(p[1]));
    p += 2;
  }
  return bytes;
}

// The hex of §12 without offsets and comments.
constexpr const char* kWorkedExample = R"(
4150 5200 0200 0004 0200 0000 4000 0000 0000 0000 6a00 0000 c000 0000 0000 0000
4001 0000 0000 0000 3b29 afb6 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
7b22 6d6f 6465 6c5f 7479 7065 223a 2274 6573 7422 2c22 6c69 6365 6e73 6522 3a6e
756c 6c2c 2264 6174 615f 736f 7572 6365 223a 6e75 6c6c 2c22 6461 7461 5f6c 6963
656e 7365 223a 6e75 6c6c 2c22 746f 7461 6c5f 7369 7a65 223a 302c 2270 6172 616d
5f63 6f75 6e74 223a 307d 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
0400 6269 6173 0001 0300 0000 0000 0000 0000 0000 0000 0000 0c00 0000 0000 0000
0600 7765 6967 6874 0002 0200 0000 0000 0000 0300 0000 0000 0000 4000 0000 0000
0000 1800 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
0000 003f 0000 80bf 0000 0040 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
0000 803f 0000 0040 0000 4040 0000 8040 0000 a040 0000 c040 0000 0000 0000 0000
0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
890e 30e7
)";

TEST(WorkedExample, MetadataJsonIsByteIdentical) {
  AprMetadata metadata;
  metadata.model_type = "test";
  EXPECT_EQ(SerializeAprMetadata(metadata),
            R"({"model_type":"test","license":null,"data_source":null,"data_license":null,)"
            R"("total_size":0,"param_count":0})");
}

TEST(WorkedExample, WholeFileIsByteIdentical) {
  AprMetadata metadata;
  metadata.model_type = "test";
  std::vector<std::string> payloads = {F32Bytes({0.5f, -1.0f, 2.0f}),
                                       F32Bytes({1, 2, 3, 4, 5, 6})};
  // aprender's in-memory writer stores data in name order: bias, then weight.
  std::vector<AprTensorSpec> tensors = {{"bias", 0, {3}, 12, 0, 0, std::nullopt},
                                        {"weight", 0, {2, 3}, 24, 1, 0, std::nullopt}};
  FilePlan plan = BuildAprPlan(SerializeAprMetadata(metadata), tensors);
  std::string file = testing::MaterializePlan(plan, payloads);
  std::string expected = FromHexDump(kWorkedExample);
  ASSERT_EQ(expected.size(), 452u);
  EXPECT_EQ(plan.total_size, 452u);
  EXPECT_EQ(plan.data_offset, 320u);
  EXPECT_EQ(plan.footer_offset, 448u);
  EXPECT_EQ(file, expected);
}

TEST(WorkedExample, GoldenModelMatchesPinnedChecksums) {
  // AF-gold: golden_v2_current.apr is 516 bytes, header checksum 0x3BC08C02, footer 0x550F3F35.
  AprMetadata metadata;
  metadata.model_type = "linear_regression";
  metadata.name = "golden-v2";
  metadata.version = "0.0.0-golden";
  metadata.created_at = "1700000000";
  metadata.param_count = 8;
  std::string json = SerializeAprMetadata(metadata);
  EXPECT_EQ(json.size(), 189u);
  std::vector<std::string> payloads = {F32Bytes({0.125f}),
                                       F32Bytes({1, 2, 0.5f, -0.5f, 4, -2, 0.25f, 8})};
  std::vector<AprTensorSpec> tensors = {{"bias", 0, {1}, 4, 0, 0, std::nullopt},
                                        {"weights", 0, {8}, 32, 1, 0, std::nullopt}};
  FilePlan plan = BuildAprPlan(json, tensors);
  std::string file = testing::MaterializePlan(plan, payloads);
  ASSERT_EQ(file.size(), 516u);
  EXPECT_EQ(plan.data_offset, 384u);
  auto u32_at = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(file[at + i]);
    return v;
  };
  EXPECT_EQ(u32_at(40), 0x3BC08C02u);
  EXPECT_EQ(u32_at(512), 0x550F3F35u);
}

}  // namespace
}  // namespace aprfs
