// The planning of computed views from headers alone: names, aprender's skip and dispatch rules
// (apr-quantization.md §3.2, §3.3), the two import paths' order, tied heads and metadata, FP8
// pairing (§9.2), and the single-file path's value checks (§3.1, §3.4, §5.3). Whole files are
// compared with the independent reference writer in the FUSE tests.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fetch/local_model.h"
#include "format/apr/apr_layout.h"
#include "format/apr/apr_reader.h"
#include "format/codec/kernels.h"
#include "format/error.h"
#include "format/views/fp8_weights.h"
#include "format/views/import_rules.h"
#include "format/views/quantized_view.h"
#include "format/views/value_checks.h"
#include "format/views/view_kind.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using testing::MakeTensor;
using testing::TempDir;
using testing::TestModel;
using testing::TestTensor;

// ----- names ------------------------------------------------------------------------------------

TEST(ViewKindTest, FileNamesSplitIntoModelAndView) {
  EXPECT_EQ(ViewFileName("phi-4", ViewKind::kApr), "phi-4.apr");
  EXPECT_EQ(ViewFileName("phi-4", ViewKind::kQ4k), "phi-4.q4k.apr");
  EXPECT_EQ(ViewStem("Qwen2.5-0.5B", ViewKind::kInt8), "Qwen2.5-0.5B.int8");
  auto split = SplitViewFileName("Qwen2.5-0.5B.q4k.apr");
  ASSERT_TRUE(split);
  EXPECT_EQ(split->first, "Qwen2.5-0.5B");
  EXPECT_EQ(split->second, ViewKind::kQ4k);
  split = SplitViewFileName("Qwen2.5-0.5B.apr");
  ASSERT_TRUE(split);
  EXPECT_EQ(split->first, "Qwen2.5-0.5B") << "'.5B' is no view";
  EXPECT_EQ(split->second, ViewKind::kApr);
  EXPECT_EQ(SplitViewFileName("x.fp16.apr")->second, ViewKind::kApr) << "canonical names only";
  EXPECT_FALSE(SplitViewFileName("x.q4k"));
  EXPECT_FALSE(SplitViewFileName(".apr"));
  EXPECT_EQ(ParseViewName("q4_k"), ViewKind::kQ4k);
  EXPECT_EQ(ParseViewName("fp16"), ViewKind::kF16);
  EXPECT_FALSE(ParseViewName("q8_0"));
  EXPECT_EQ(ViewFileName("phi-4", ViewKind::kSafetensors), "phi-4.safetensors");
  split = SplitViewFileName("Qwen2.5-0.5B.safetensors");
  ASSERT_TRUE(split);
  EXPECT_EQ(split->first, "Qwen2.5-0.5B");
  EXPECT_EQ(split->second, ViewKind::kSafetensors);
  EXPECT_EQ(SplitViewFileName("x.safetensors.apr")->second, ViewKind::kApr) << "a model's .apr";
  EXPECT_FALSE(SplitViewFileName(".safetensors"));
  EXPECT_EQ(ParseViewName("safetensors"), ViewKind::kSafetensors);
}

// ----- rules ------------------------------------------------------------------------------------

TEST(ImportRulesTest, SkipPredicateMatchesTheNewestAprender) {
  for (const char* kept : {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.3.self_attn.q_norm.weight", "model.layers.0.q_proj.bias",
                           "model.layers.1.mlp.gate.e_score_correction_bias",
                           "model.layers.0.linear_attn.conv1d.weight",
                           "model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.dt_bias",
                           "blk.2.ssm_conv1d.weight", "blk.2.ssm_a", "blk.2.ssm_dt.bias",
                           "blk.2.ssm_dt_bias"}) {
    EXPECT_TRUE(SkipsQuantization(kept, 64 * 4096)) << kept;
  }
  for (const char* quantized : {"model.embed_tokens.weight", "lm_head.weight",
                                "model.layers.1.mlp.gate.weight", "blk.2.ssm_alpha",
                                "blk.2.ssm_beta", "blk.2.ssm_out", "blk.2.ssm_dt.weight",
                                "model.layers.0.linear_attn.in_proj_qkvz.weight", "out_proj"}) {
    EXPECT_FALSE(SkipsQuantization(quantized, 64 * 4096)) << quantized;
  }
  EXPECT_TRUE(SkipsQuantization("w", 1023));
  EXPECT_FALSE(SkipsQuantization("w", 1024));
}

TEST(ImportRulesTest, DispatchFollowsTheDecisionTable) {
  using enum SourceDtype;
  const auto h = ImportPath::kSharded;
  const auto s = ImportPath::kSingleFile;
  auto code = [](ViewKind v, ImportPath p, SourceDtype from, const char* name = "w") {
    return Dispatch(v, p, from, name, 1 << 20).dtype;
  };
  auto encodes = [](ViewKind v, ImportPath p, SourceDtype from, const char* name = "w") {
    return Dispatch(v, p, from, name, 1 << 20).encoding.has_value();
  };
  EXPECT_EQ(code(ViewKind::kF16, h, kBF16), kAprBf16) << "path H keeps BF16 under fp16";
  EXPECT_FALSE(encodes(ViewKind::kF16, h, kBF16));
  EXPECT_EQ(code(ViewKind::kF16, s, kBF16), kAprF16) << "path S converts every tensor";
  EXPECT_TRUE(encodes(ViewKind::kF16, s, kBF16));
  EXPECT_FALSE(encodes(ViewKind::kF16, s, kF16)) << "F16 -> f32 -> F16 keeps the bytes";
  EXPECT_EQ(code(ViewKind::kF16, h, kF32), kAprF16);
  EXPECT_EQ(code(ViewKind::kQ4k, h, kBF16), kAprQ4K);
  EXPECT_EQ(code(ViewKind::kInt8, s, kF16), kAprQ8);
  EXPECT_EQ(code(ViewKind::kInt4, h, kF32), kAprQ4);
  EXPECT_EQ(code(ViewKind::kQ4k, h, kBF16, "model.norm.weight"), kAprF32)
      << "a skipped tensor is written F32 even from BF16";
  EXPECT_TRUE(encodes(ViewKind::kQ4k, h, kBF16, "model.norm.weight"));
  EXPECT_FALSE(encodes(ViewKind::kQ4k, h, kF32, "model.norm.weight"));
}

// ----- plans ------------------------------------------------------------------------------------

struct PlannedModel {
  TempDir dir;
  LoadedModel loaded;
  QuantizedView Plan(ViewKind view, SingleFileFacts facts = {}) {
    return PlanQuantizedView(loaded.set, view, ViewStem("m", view), facts);
  }
};

std::unique_ptr<PlannedModel> Load(const TestModel& model) {
  auto planned = std::make_unique<PlannedModel>();
  testing::WriteModel(planned->dir.path(), model);
  planned->loaded = LoadLocalModel(planned->dir.path(), "m", std::nullopt);
  return planned;
}

std::string Metadata(const FilePlan& plan) {
  AprHeaderFields header = DecodeAprHeader(std::string_view(plan.prefix).substr(0, 64));
  return plan.prefix.substr(header.metadata_offset, header.metadata_size);
}

// Tensors by name -> (dtype code, data offset, size), from the plan's index.
std::map<std::string, AprIndexEntry> Index(const FilePlan& plan) {
  AprFile file = ReadAprFile(
      [&](uint64_t offset, uint64_t length) {
        return offset < plan.prefix.size() ? plan.prefix.substr(offset, length) : std::string();
      },
      plan.total_size);
  std::map<std::string, AprIndexEntry> entries;
  for (const AprIndexEntry& entry : file.index) entries[entry.name] = entry;
  return entries;
}

TestModel TiedSharded() {
  TestModel model;
  model.shards = {{MakeTensor("model.embed_tokens.weight", "BF16", {64, 300}),
                   MakeTensor("model.norm.weight", "BF16", {300})},
                  {MakeTensor("model.layers.0.mlp.up_proj.weight", "BF16", {40, 300}),
                   MakeTensor("a.weight", "F32", {2048})}};
  model.config_json = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                          "hidden_size": 300, "num_hidden_layers": 1, "vocab_size": 64})";
  return model;
}

TEST(QuantizedViewTest, ShardedPathOrdersDataByShardThenNameAndAppendsTheTiedHead) {
  auto model = Load(TiedSharded());
  QuantizedView view = model->Plan(ViewKind::kQ4k);
  EXPECT_EQ(view.path, ImportPath::kSharded);
  auto index = Index(view.plan);
  ASSERT_EQ(index.size(), 5u);
  // Insertion order: shard 1 by name, shard 2 by name, then the added head.
  EXPECT_LT(index["model.embed_tokens.weight"].offset, index["model.norm.weight"].offset);
  EXPECT_LT(index["model.norm.weight"].offset, index["a.weight"].offset);
  EXPECT_LT(index["a.weight"].offset, index["model.layers.0.mlp.up_proj.weight"].offset);
  EXPECT_LT(index["model.layers.0.mlp.up_proj.weight"].offset, index["lm_head.weight"].offset);
  EXPECT_EQ(index["lm_head.weight"].dtype, kAprQ4K);
  EXPECT_EQ(index["lm_head.weight"].size, 64u * 2 * 144) << "rows of 300 pad to two blocks";
  EXPECT_EQ(index["model.norm.weight"].dtype, kAprF32);
  EXPECT_EQ(index["model.norm.weight"].size, 300u * 4);
  EXPECT_EQ(index["a.weight"].dtype, kAprQ4K);
  EXPECT_EQ(index["a.weight"].size, 8u * 144) << "1-D: flat blocks";
  nlohmann::json meta = nlohmann::json::parse(Metadata(view.plan));
  EXPECT_EQ(meta["name"], "m.q4k");
  EXPECT_EQ(meta["model_type"], "Llama");
  EXPECT_EQ(meta["param_count"], 0);
  EXPECT_FALSE(meta.contains("tensor_shapes")) << "path H writes no tensor_shapes";
  EXPECT_FALSE(meta.contains("source"));

  // The f16 view passes BF16 through, but the added head (f32 values) becomes F16.
  index = Index(model->Plan(ViewKind::kF16).plan);
  EXPECT_EQ(index["model.embed_tokens.weight"].dtype, kAprBf16);
  EXPECT_EQ(index["lm_head.weight"].dtype, kAprF16);
  EXPECT_EQ(index["a.weight"].dtype, kAprF16);
}

TEST(QuantizedViewTest, SingleFilePathSortsByNameTiesAZeroHeadAndCountsParams) {
  TestModel model;
  model.layout = TestModel::Layout::Single;
  model.shards = {{MakeTensor("z.weight", "BF16", {4, 256}),
                   MakeTensor("model.embed_tokens.weight", "F16", {8, 128}),
                   MakeTensor("lm_head.weight", "F16", {8, 128})}};
  auto loaded = Load(model);
  QuantizedView view = loaded->Plan(ViewKind::kInt8);
  EXPECT_EQ(view.path, ImportPath::kSingleFile);
  auto index = Index(view.plan);
  EXPECT_LT(index["lm_head.weight"].offset, index["model.embed_tokens.weight"].offset);
  EXPECT_LT(index["model.embed_tokens.weight"].offset, index["z.weight"].offset);
  nlohmann::json meta = nlohmann::json::parse(Metadata(view.plan));
  EXPECT_EQ(meta["model_type"], "Auto");
  EXPECT_EQ(meta["param_count"], 1024 + 1024 + 1024);
  EXPECT_FALSE(meta.contains("tied_embeddings")) << "a real head is not tied";
  EXPECT_TRUE(meta["tensor_shapes"].contains("lm_head.weight"));

  // An all-zero head (found by the scan) is replaced by the embedding: tied.
  SingleFileFacts facts;
  facts.lm_head_mostly_zero = true;
  QuantizedView tied = loaded->Plan(ViewKind::kInt8, facts);
  meta = nlohmann::json::parse(Metadata(tied.plan));
  EXPECT_EQ(meta["tied_embeddings"], true);
  const DataExtent* head = nullptr;
  auto tied_index = Index(tied.plan);
  for (const DataExtent& extent : tied.plan.extents) {
    if (extent.offset == tied.plan.data_offset + tied_index["lm_head.weight"].offset) head = &extent;
  }
  ASSERT_NE(head, nullptr);
  for (const DataExtent& extent : tied.plan.extents) {
    if (extent.offset == tied.plan.data_offset + tied_index["model.embed_tokens.weight"].offset) {
      EXPECT_EQ(head->source_offset, extent.source_offset) << "the head reads the embedding";
    }
  }
}

TEST(QuantizedViewTest, RefusesWhatAprenderCannotImport) {
  TestModel model = TiedSharded();
  model.shards[1].push_back(MakeTensor("counts", "I8", {16}));
  auto loaded = Load(model);
  try {
    loaded->Plan(ViewKind::kQ4k);
    FAIL() << "an I8 tensor cannot be converted to f32";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'counts'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("I8"), std::string::npos) << e.what();
  }
  TestModel gpt2 = TiedSharded();
  gpt2.config_json = R"({"model_type": "gpt2"})";
  auto renamed = Load(gpt2);
  EXPECT_THROW(renamed->Plan(ViewKind::kF16), FormatError);
}

// ----- FP8 ---------------------------------------------------------------------------------------

TestModel Fp8Model(const std::vector<uint64_t>& scale_shape, const std::string& scale_dtype = "F32") {
  TestModel model;
  model.shards = {{MakeTensor("w.weight", "F8_E4M3", {200, 300}),
                   MakeTensor("w.weight_scale_inv", scale_dtype, scale_shape)},
                  {MakeTensor("b.bias", "F32", {300})}};
  return model;
}

TEST(Fp8WeightsTest, PairsEachWeightWithItsScalesAnywhereInTheModel) {
  auto loaded = Load(Fp8Model({2, 3}));
  Fp8Weights fp8 = Fp8Weights::Find(loaded->loaded.set);
  EXPECT_FALSE(fp8.empty());
  const auto& tensors = loaded->loaded.set.shards[0].header.tensors;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == "w.weight_scale_inv") {
      EXPECT_TRUE(fp8.IsScale({0, i}));
    } else {
      std::optional<TensorCodec> codec = fp8.DequantCodec({0, i}, tensors[i].shape);
      ASSERT_TRUE(codec);
      EXPECT_EQ(codec->from, SourceDtype::kE4M3);
      EXPECT_EQ(codec->to, Encoding::kBF16);
      EXPECT_EQ(codec->rows, 200u);
      EXPECT_EQ(codec->block_rows, 128u);
      EXPECT_EQ(EncodedSize(*codec), 200u * 300 * 2);
    }
  }
  auto e8m0 = Load(Fp8Model({2, 3}, "U8"));
  EXPECT_FALSE(Fp8Weights::Find(e8m0->loaded.set).empty());
}

TEST(Fp8WeightsTest, RefusesWeightsWithoutUsableScalesNamingTheRule) {
  struct Case {
    TestModel model;
    const char* rule;
  };
  TestModel missing;
  missing.shards = {{MakeTensor("w.weight", "F8_E4M3", {4, 4})}};
  TestModel flat;
  flat.shards = {{MakeTensor("w.weight", "F8_E4M3", {16}), MakeTensor("w.weight_scale_inv", "F32", {1})}};
  std::vector<Case> cases;
  cases.push_back({missing, "no such tensor"});
  cases.push_back({Fp8Model({1, 3}), "need [2, 3]"});
  cases.push_back({Fp8Model({2, 3}, "BF16"), "BF16"});
  cases.push_back({flat, "2-D"});
  for (const Case& c : cases) {
    auto loaded = Load(c.model);
    try {
      Fp8Weights::Find(loaded->loaded.set);
      FAIL() << c.rule;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("'w.weight'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.rule), std::string::npos) << e.what();
    }
  }
}

// ----- the single-file path's value checks --------------------------------------------------------

ValueStats StatsOf(const std::vector<float>& values) {
  ValueStats stats;
  stats.Add(values.data(), values.size(), codec::BestKernels());
  return stats;
}

std::vector<ScanItem> Items(std::initializer_list<const char*> names) {
  std::vector<ScanItem> items;
  for (const char* name : names) items.push_back({name, {}, 0, 0});
  return items;
}

TEST(ValueChecksTest, NanInfAndLargeMeansRefuseEveryQuantizedView) {
  std::vector<float> fine(2048, 0.01f);
  std::vector<float> nan = fine;
  nan[7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> inf = fine;
  inf[9] = -std::numeric_limits<float>::infinity();
  std::vector<float> shifted(2048, 100.5f);
  auto refusal = [&](const std::vector<float>& bad) {
    return JudgeSingleFile(Items({"a", "b"}), {StatsOf(fine), StatsOf(bad)}).refusal;
  };
  EXPECT_FALSE(refusal(fine));
  ASSERT_TRUE(refusal(nan));
  EXPECT_NE(refusal(nan)->find("'b': 1 NaN"), std::string::npos) << *refusal(nan);
  ASSERT_TRUE(refusal(inf));
  EXPECT_NE(refusal(inf)->find("infinite"), std::string::npos);
  ASSERT_TRUE(refusal(shifted));
  EXPECT_NE(refusal(shifted)->find("mean 100.5"), std::string::npos) << *refusal(shifted);
  std::vector<float> edge(2048, 100.0f);
  EXPECT_FALSE(refusal(edge)) << "|mean| must exceed 100";
}

TEST(ValueChecksTest, ZeroHeadAndInt4DensityAreDecidedFromValues) {
  std::vector<float> weights(4096);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  std::vector<float> zeros(4096, 0.0f);
  std::vector<float> almost = zeros;
  almost[5] = 1.0f;  // one block of 32 holds a value: 31 of its codes are still zero
  SingleFileVerdict verdict = JudgeSingleFile(Items({"lm_head.weight", "model.embed_tokens.weight", "w"}),
                                              {StatsOf(zeros), StatsOf(weights), StatsOf(weights)});
  EXPECT_TRUE(verdict.facts.lm_head_mostly_zero);
  EXPECT_FALSE(verdict.int4_refusal) << "a replaced head is not encoded";
  verdict = JudgeSingleFile(Items({"w"}), {StatsOf(almost)});
  ASSERT_TRUE(verdict.int4_refusal);
  EXPECT_NE(verdict.int4_refusal->find("'w'"), std::string::npos);
  EXPECT_FALSE(verdict.refusal) << "density concerns int4 only";
  verdict = JudgeSingleFile(Items({"model.norm.weight"}), {StatsOf(zeros)});
  EXPECT_FALSE(verdict.int4_refusal) << "skipped tensors are not encoded";
}

}  // namespace
}  // namespace aprfs
