// BuildAprPlan's aliases (a tied head sharing the embedding's bytes) and the consuming form of
// AppendAprMetadata.
#include <gtest/gtest.h>

#include "format/apr/apr_metadata.h"
#include "format/apr/apr_plan.h"
#include "format/error.h"

namespace aprfs {
namespace {

std::string ErrorOf(const std::vector<AprTensorSpec>& tensors) {
  try {
    BuildAprPlan("{}", tensors);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(AprPlanAlias, TakesItsTargetsOffsetAndAddsNoBytes) {
  // Data order: embed (100 bytes), norm (8), head = embed.
  std::vector<AprTensorSpec> tensors = {{"model.embed", 0, {25}, 100, 0, 1000, std::nullopt},
                                        {"norm", 0, {2}, 8, 1, 2000, std::nullopt},
                                        {"lm_head.weight", 0, {25}, 100, 0, 1000, 0u}};
  FilePlan plan = BuildAprPlan("{}", tensors);
  ASSERT_EQ(plan.extents.size(), 2u);
  EXPECT_EQ(plan.extents[0].offset, plan.data_offset);
  EXPECT_EQ(plan.extents[1].offset, plan.data_offset + 128);
  EXPECT_EQ(plan.footer_offset, plan.data_offset + 128 + 64);
  // Index order: lm_head.weight, model.embed, norm; the head's offset is the embedding's (0).
  const uint64_t entry = plan.prefix.find("lm_head.weight");
  ASSERT_NE(entry, std::string::npos);
  const uint64_t offset_at = entry + 14 + 1 + 1 + 8;  // name, dtype, ndim, one dim
  EXPECT_EQ(LoadLe(plan.prefix, offset_at, 8), 0u);
  EXPECT_EQ(LoadLe(plan.prefix, offset_at + 8, 8), 100u);
}

TEST(AprPlanAlias, RefusesATargetOutsideTheList) {
  std::string error = ErrorOf({{"a", 0, {1}, 4, 0, 0, std::nullopt}, {"b", 0, {1}, 4, 0, 0, 7u}});
  EXPECT_NE(error.find("tensor 'b' aliases tensor #7 of a list of 2"), std::string::npos)
      << error;
}

TEST(AprPlanAlias, RefusesATargetOfAnotherSizeOrAnAliasOfAnAlias) {
  std::string error = ErrorOf({{"a", 0, {1}, 4, 0, 0, std::nullopt}, {"b", 0, {2}, 8, 0, 0, 0u}});
  EXPECT_NE(error.find("tensor 'b' aliases 'a', which is not a stored tensor of the same size"),
            std::string::npos)
      << error;
  error = ErrorOf({{"a", 0, {1}, 4, 0, 0, std::nullopt},
                   {"b", 0, {1}, 4, 0, 0, 0u},
                   {"c", 0, {1}, 4, 0, 0, 1u}});
  EXPECT_NE(error.find("tensor 'c' aliases 'b'"), std::string::npos) << error;
}

TEST(AprMetadataAppend, ConsumingFormWritesTheSameBytesAndFreesTheCustomValues) {
  AprMetadata metadata;
  metadata.model_type = "llama";
  metadata.name = "m";
  metadata.param_count = 42;
  metadata.custom["tensor_shapes"] = R"({"a":[1,2]})";
  metadata.custom["tokenizer.vocabulary"] = R"(["x","y"])";
  const std::string expected = SerializeAprMetadata(metadata);
  std::string out = "prefix:";
  AppendAprMetadata(out, std::move(metadata));
  EXPECT_EQ(out, "prefix:" + expected);
  for (const auto& [key, text] : metadata.custom) EXPECT_TRUE(text.empty()) << key;
}

}  // namespace
}  // namespace aprfs
