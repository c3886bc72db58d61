// ParseWeightIndex: model.safetensors.index.json (hf-hub.md §7.2) and its shard-path rules.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "format/error.h"
#include "format/model/shard_set.h"

namespace aprfs {
namespace {

constexpr const char* kIndexFile = "/models/phi-4/model.safetensors.index.json";

std::string IndexWith(const std::string& weight_map_body) {
  return "{\"metadata\":{\"total_size\":123},\"weight_map\":{" + weight_map_body + "}}";
}

struct BadIndex {
  std::string label;
  std::string text;
  std::vector<std::string> needles;  // besides the file name
};

void PrintTo(const BadIndex& c, std::ostream* os) { *os << c.label; }

class MalformedWeightIndex : public ::testing::TestWithParam<BadIndex> {};

TEST_P(MalformedWeightIndex, IsRejectedNamingFileTensorAndRule) {
  const BadIndex& c = GetParam();
  try {
    WeightIndex index = ParseWeightIndex(c.text, kIndexFile);
    ADD_FAILURE() << "accepted, " << index.weight_map.size() << " tensors";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(kIndexFile), std::string::npos) << message;
    for (const std::string& needle : c.needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "'" << needle << "': " << message;
    }
  }
}

std::vector<BadIndex> BadIndexes() {
  const std::string ok = "\"a.weight\":\"model-00001-of-00002.safetensors\",";
  return {
      {"NotJson", "{\"weight_map\":", {"not valid JSON"}},
      {"Garbage", "model-00001.safetensors", {"not valid JSON"}},
      {"Empty", "", {"not valid JSON"}},
      {"TopLevelArray", "[{\"weight_map\":{}}]", {"JSON object"}},
      {"TopLevelString", "\"weight_map\"", {"JSON object"}},
      {"NoWeightMap", "{\"metadata\":{\"total_size\":1}}", {"weight_map"}},
      {"WeightMapArray", "{\"weight_map\":[\"model.safetensors\"]}", {"weight_map"}},
      {"WeightMapString", "{\"weight_map\":\"model.safetensors\"}", {"weight_map"}},
      {"WeightMapNull", "{\"weight_map\":null}", {"weight_map"}},
      {"ValueNumber", IndexWith(ok + "\"b.weight\":1"), {"b.weight", "string"}},
      {"ValueNull", IndexWith(ok + "\"b.null\":null"), {"b.null", "string"}},
      {"ValueArray", IndexWith(ok + "\"b.arr\":[\"x.safetensors\"]"), {"b.arr", "string"}},
      {"EmptyName", IndexWith(ok + "\"b.empty\":\"\""), {"b.empty", "empty"}},
      {"AbsolutePath", IndexWith(ok + "\"b.abs\":\"/etc/passwd\""),
       {"b.abs", "/etc/passwd", "absolute"}},
      {"DotDotAtStart", IndexWith(ok + "\"b.up\":\"../other/model.safetensors\""),
       {"b.up", "../other/model.safetensors", ".."}},
      {"DotDotInMiddle", IndexWith(ok + "\"b.mid\":\"sub/../../x.safetensors\""),
       {"b.mid", "sub/../../x.safetensors", ".."}},
      {"DotDotHarmlessLooking", IndexWith(ok + "\"b.mid2\":\"sub/../x.safetensors\""),
       {"b.mid2", ".."}},
      {"DotDotAtEnd", IndexWith(ok + "\"b.end\":\"sub/..\""), {"b.end", "sub/..", ".."}},
      {"DotDotAlone", IndexWith(ok + "\"b.alone\":\"..\""), {"b.alone", ".."}},
      {"DotSlash", IndexWith(ok + "\"b.dot\":\"./x.safetensors\""), {"b.dot", "./x.safetensors"}},
      {"DotSegmentInMiddle", IndexWith(ok + "\"b.dotmid\":\"a/./x.safetensors\""),
       {"b.dotmid", "'.'"}},
      {"EmptySegment", IndexWith(ok + "\"b.dbl\":\"a//x.safetensors\""), {"b.dbl", "empty"}},
      {"TrailingSlash", IndexWith(ok + "\"b.slash\":\"sub/\""), {"b.slash", "empty"}},
      {"Backslash", IndexWith(ok + "\"b.win\":\"sub\\\\x.safetensors\""), {"b.win", "backslash"}},
      {"BackslashDotDot", IndexWith(ok + "\"b.win2\":\"..\\\\x.safetensors\""),
       {"b.win2", "backslash"}},
      {"EmptyWeightMap", "{\"metadata\":{},\"weight_map\":{}}", {"empty"}},
  };
}

INSTANTIATE_TEST_SUITE_P(WeightIndex, MalformedWeightIndex, ::testing::ValuesIn(BadIndexes()),
                         [](const ::testing::TestParamInfo<BadIndex>& info) {
                           return info.param.label;
                         });

TEST(WeightIndexNul, NulByteInShardPathIsRejected) {
  std::string text =
      IndexWith("\"a\":\"m.safetensors\",\"b.nul\":\"x\\u0000.safetensors\"");
  try {
    ParseWeightIndex(text, kIndexFile);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(kIndexFile), std::string::npos) << message;
    EXPECT_NE(message.find("b.nul"), std::string::npos) << message;
  }
}

// FormatError::what() is a C string: a raw NUL copied from the shard path into the message cuts
// it short, so the user never sees the rule.
TEST(WeightIndexNul, NulByteMessageStillNamesTheRule) {
  std::string text = IndexWith("\"b.nul\":\"x\\u0000.safetensors\"");
  try {
    ParseWeightIndex(text, kIndexFile);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("NUL"), std::string::npos) << message;
  }
}

TEST(WeightIndexValid, ShardFilesSortedByteWiseAndDeduplicated) {
  std::string text = IndexWith(
      "\"t1\":\"model-00002-of-00003.safetensors\","
      "\"t2\":\"model-00001-of-00003.safetensors\","
      "\"t3\":\"model-00003-of-00003.safetensors\","
      "\"t4\":\"model-00001-of-00003.safetensors\","
      "\"t5\":\"Model-Z.safetensors\","
      "\"t6\":\"\xc3\xa9t\xc3\xa9.safetensors\","
      "\"t7\":\"zz.safetensors\","
      "\"t8\":\"model-00002-of-00003.safetensors\"");
  WeightIndex index = ParseWeightIndex(text, kIndexFile);
  // Byte-wise: uppercase before lowercase, UTF-8 lead bytes (0xC3) after ASCII.
  EXPECT_EQ(index.shard_files,
            (std::vector<std::string>{"Model-Z.safetensors", "model-00001-of-00003.safetensors",
                                      "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "zz.safetensors",
                                      "\xc3\xa9t\xc3\xa9.safetensors"}));
  ASSERT_EQ(index.weight_map.size(), 8u);
  EXPECT_EQ(*index.ShardOf("t1"), "model-00002-of-00003.safetensors");
  EXPECT_EQ(*index.ShardOf("t4"), "model-00001-of-00003.safetensors");
  EXPECT_EQ(*index.ShardOf("t6"), "\xc3\xa9t\xc3\xa9.safetensors");
}

TEST(WeightIndexValid, SubfoldersAndDotsInNamesAreAllowed) {
  std::string text = IndexWith(
      "\"a\":\"transformer/diffusion_pytorch_model-00001-of-00002.safetensors\","
      "\"b\":\"a/b/c/d.safetensors\","
      "\"c\":\"..hidden.safetensors\","
      "\"d\":\"sub/...safetensors\","
      "\"e\":\"x..y/z.safetensors\"");
  WeightIndex index = ParseWeightIndex(text, kIndexFile);
  EXPECT_EQ(index.shard_files.size(), 5u);
  EXPECT_EQ(*index.ShardOf("a"),
            "transformer/diffusion_pytorch_model-00001-of-00002.safetensors");
  EXPECT_EQ(*index.ShardOf("c"), "..hidden.safetensors");
}

TEST(WeightIndexValid, MetadataIsOptionalAndExtraKeysIgnored) {
  WeightIndex index = ParseWeightIndex(
      "{\"weight_map\":{\"x\":\"model.safetensors\"},\"extra\":[1,2],\"metadata\":null}",
      kIndexFile);
  EXPECT_EQ(index.shard_files, (std::vector<std::string>{"model.safetensors"}));
  // Whitespace and key order do not matter.
  WeightIndex pretty = ParseWeightIndex(
      "{\n  \"weight_map\": {\n    \"y\": \"b.safetensors\",\n    \"x\": \"a.safetensors\"\n  },\n"
      "  \"metadata\": {\"total_size\": 16060522496}\n}\n",
      kIndexFile);
  EXPECT_EQ(pretty.shard_files, (std::vector<std::string>{"a.safetensors", "b.safetensors"}));
  EXPECT_EQ(*pretty.ShardOf("y"), "b.safetensors");
}

TEST(WeightIndexValid, TensorNamesAreKeptVerbatim) {
  WeightIndex index = ParseWeightIndex(
      IndexWith("\"model.layers.0.self_attn.q_proj.weight\":\"m.safetensors\","
                "\"\":\"m.safetensors\",\"with space\":\"m.safetensors\""),
      kIndexFile);
  EXPECT_EQ(index.weight_map.size(), 3u);
  EXPECT_TRUE(index.ShardOf("model.layers.0.self_attn.q_proj.weight") != nullptr);
  EXPECT_TRUE(index.ShardOf("with space") != nullptr);
}

}  // namespace
}  // namespace aprfs
