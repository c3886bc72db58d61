// The GGUF views' pure parts: the container's bytes read back by a parser written here from
// the spec (gguf-view.md §1), name mapping and refusals (§3.1), the LLaMA Q/K permutation
// (§3.3a), size labels (§2.1), pre-tokenizer rules (§4.6), llama-quantize's Q4_K_M type rules
// (§5.6), SentencePiece's tokenizer.model and the vocabulary built from it (§4.3). llama.cpp itself loads the views in
// the FUSE tests (gguf_view_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/codec/kernels.h"
#include "format/codec/tensor_codec.h"
#include "format/error.h"
#include "format/gguf/gguf_arch.h"
#include "format/gguf/gguf_container.h"
#include "format/gguf/gguf_quantize.h"
#include "format/gguf/gguf_reader.h"
#include "format/gguf/gguf_tensors.h"
#include "format/gguf/gguf_vocab.h"
#include "format/gguf/sentencepiece_model.h"

namespace aprfs {
namespace {

// A reader of what the spec says, independent of the writer.
struct Reader {
  const std::string& bytes;
  size_t at = 0;
  uint64_t U(int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(bytes.at(at + i));
    at += n;
    return v;
  }
  std::string S() {
    const uint64_t n = U(8);
    std::string s = bytes.substr(at, n);
    at += n;
    return s;
  }
};

struct ParsedInfo {
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

struct Parsed {
  std::map<std::string, std::pair<uint32_t, std::string>> kv;  // type, payload as text
  std::vector<std::string> kv_order;
  std::vector<std::pair<std::string, ParsedInfo>> infos;
  uint64_t data_start = 0;
};

Parsed Parse(const std::string& bytes) {
  Reader r{bytes};
  Parsed p;
  EXPECT_EQ(bytes.substr(0, 4), "GGUF");
  r.at = 4;
  EXPECT_EQ(r.U(4), 3u);
  const uint64_t tensors = r.U(8), kvs = r.U(8);
  for (uint64_t i = 0; i < kvs; ++i) {
    const std::string key = r.S();
    const uint32_t type = static_cast<uint32_t>(r.U(4));
    std::string value;
    switch (type) {
      case 4: value = std::to_string(r.U(4)); break;
      case 6: {
        const uint32_t bits = static_cast<uint32_t>(r.U(4));
        float f;
        std::memcpy(&f, &bits, 4);
        value = std::to_string(f);
        break;
      }
      case 7: value = r.U(1) ? "true" : "false"; break;
      case 8: value = r.S(); break;
      case 9: {
        const uint32_t element = static_cast<uint32_t>(r.U(4));
        const uint64_t n = r.U(8);
        value = std::to_string(element) + "[" + std::to_string(n) + "]";
        for (uint64_t j = 0; j < n; ++j) value += " " + (element == 8 ? r.S() : std::to_string(r.U(4)));
        break;
      }
      default: ADD_FAILURE() << "unexpected type " << type; return p;
    }
    p.kv[key] = {type, value};
    p.kv_order.push_back(key);
  }
  for (uint64_t i = 0; i < tensors; ++i) {
    const std::string name = r.S();
    ParsedInfo info;
    const uint32_t dims = static_cast<uint32_t>(r.U(4));
    for (uint32_t d = 0; d < dims; ++d) info.ne.push_back(r.U(8));
    info.type = static_cast<uint32_t>(r.U(4));
    info.offset = r.U(8);
    p.infos.emplace_back(name, info);
  }
  p.data_start = (r.at + 31) / 32 * 32;
  return p;
}

TEST(GgufContainerTest, HeaderKvsInfosAndDataFollowTheSpec) {
  GgufMetadata kv;
  kv.String("general.architecture", "llama");
  kv.U32("llama.block_count", 2);
  kv.F32("llama.rope.freq_base", 500000.0f);
  kv.Bool("tokenizer.ggml.add_bos_token", true);
  kv.StringArray("tokenizer.ggml.tokens", {"a", "bc"});
  kv.I32Array("tokenizer.ggml.token_type", {1, 3});
  kv.U32("llama.block_count", 3);  // set again: keeps its place, takes the new value

  GgufTensor generated;
  generated.name = "rope_freqs.weight";
  generated.ne = {3};
  generated.inline_bytes = std::string(12, '\x7f');
  GgufTensor weight;
  weight.name = "blk.0.attn_q.weight";
  weight.ne = {4, 2};  // 2 rows of 4 F16
  weight.type = GgmlType::kF16;
  weight.pieces = {{0, 8, 1, 1000, kVerbatim}, {8, 8, 0, 2000, kVerbatim}};
  GgufTensor norm;
  norm.name = "output_norm.weight";
  norm.ne = {5};
  norm.pieces = {{0, 20, 0, 50, 0}};
  TensorCodec codec;
  codec.from = SourceDtype::kBF16;
  codec.to = Encoding::kF32;
  codec.cols = 5;
  const FilePlan plan = BuildGgufPlan(kv, {generated, weight, norm}, {codec});

  Parsed p = Parse(plan.prefix);
  EXPECT_EQ(p.kv_order, (std::vector<std::string>{"general.architecture", "llama.block_count",
                                                  "llama.rope.freq_base",
                                                  "tokenizer.ggml.add_bos_token",
                                                  "tokenizer.ggml.tokens",
                                                  "tokenizer.ggml.token_type"}));
  EXPECT_EQ(p.kv["llama.block_count"], std::make_pair(4u, std::string("3")));
  EXPECT_EQ(p.kv["llama.rope.freq_base"].first, 6u);
  EXPECT_EQ(p.kv["tokenizer.ggml.add_bos_token"].second, "true");
  EXPECT_EQ(p.kv["tokenizer.ggml.tokens"].second, "8[2] a bc");
  EXPECT_EQ(p.kv["tokenizer.ggml.token_type"].second, "5[2] 1 3");
  ASSERT_EQ(p.infos.size(), 3u);
  EXPECT_EQ(p.infos[0].second.offset, 0u);
  EXPECT_EQ(p.infos[1].second.offset, 32u) << "12 bytes padded to 32";
  EXPECT_EQ(p.infos[1].second.ne, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(p.infos[1].second.type, 1u);
  EXPECT_EQ(p.infos[2].second.offset, 64u);
  EXPECT_EQ(p.data_start, plan.data_offset);
  // The generated tensor's bytes are in the prefix, then the pieces at their offsets.
  EXPECT_EQ(plan.prefix.size(), plan.data_offset + 32);
  EXPECT_EQ(plan.prefix.substr(plan.data_offset, 12), std::string(12, '\x7f'));
  EXPECT_EQ(plan.prefix.substr(plan.data_offset + 12), std::string(20, '\0'));
  ASSERT_EQ(plan.extents.size(), 3u);
  EXPECT_EQ(plan.extents[0].offset, plan.data_offset + 32);
  EXPECT_EQ(plan.extents[0].source, 1u);
  EXPECT_EQ(plan.extents[1].offset, plan.data_offset + 40);
  EXPECT_EQ(plan.extents[1].source_offset, 2000u);
  EXPECT_EQ(plan.extents[2].offset, plan.data_offset + 64);
  EXPECT_EQ(plan.extents[2].codec, 0u);
  EXPECT_EQ(plan.total_size, plan.data_offset + 96) << "the last tensor padded too";
  EXPECT_FALSE(plan.has_footer());
}

// The reader behind `aprfs inspect`, on what the writer lays out, and on damaged copies.
TEST(GgufReaderTest, ReadsTheWritersLayoutAndNamesBrokenRules) {
  GgufMetadata kv;
  kv.String("general.architecture", "llama");
  kv.String("tokenizer.ggml.model", "gpt2");
  kv.StringArray("tokenizer.ggml.tokens", {"a", "b"});
  GgufTensor a, b;
  a.name = "a";
  a.ne = {3};
  a.pieces = {{0, 12, 0, 0, kVerbatim}};
  b.name = "b";
  b.ne = {32, 2};
  b.type = GgmlType::kQ8_0;
  b.pieces = {{0, 68, 0, 0, kVerbatim}};
  const FilePlan plan = BuildGgufPlan(kv, {a, b}, {});
  std::string file = plan.prefix + std::string(plan.total_size - plan.prefix.size(), '\0');
  auto read = [&](const std::string& bytes) {
    return ReadGgufFile([&](uint64_t at, uint64_t n) { return bytes.substr(at, n); }, bytes.size(),
                        "f.gguf");
  };
  GgufFile ok = read(file);
  EXPECT_TRUE(ok.problems.empty()) << ok.problems.front();
  ASSERT_EQ(ok.tensors.size(), 2u);
  EXPECT_EQ(ok.tensors[1].offset, 32u);
  EXPECT_EQ(ok.tensors[1].bytes, 68u);
  EXPECT_EQ(ok.data_start, plan.data_offset);
  EXPECT_EQ(GgmlTypeNameById(ok.tensors[1].type), "Q8_0");

  GgufFile cut = read(file.substr(0, file.size() - 40));
  ASSERT_EQ(cut.problems.size(), 1u);
  EXPECT_NE(cut.problems[0].find("tensor 'b': its data ends past the end"), std::string::npos);
  // b's info record: name (u64 length 1, "b"), 2 dims, ne, type, then its offset: 32 -> 64.
  std::string moved = file;
  const size_t record = plan.prefix.find(std::string("\x01\0\0\0\0\0\0\0b\x02\0\0\0", 13));
  ASSERT_NE(record, std::string::npos);
  const size_t offset_field = record + 9 + 4 + 16 + 4;
  ASSERT_EQ(moved[offset_field], 32);
  moved[offset_field] = 64;
  GgufFile bad = read(moved);
  ASSERT_FALSE(bad.problems.empty());
  EXPECT_NE(bad.problems[0].find("tensor 'b' has offset 64, expected 32"), std::string::npos)
      << bad.problems[0];
  EXPECT_FALSE(read(file.substr(0, 30)).problems.empty());
}

TEST(GgufContainerTest, RefusesWhatTheLoaderWouldNamingTheTensor) {
  GgufMetadata kv;
  auto build = [&](GgufTensor t) { return BuildGgufPlan(kv, {t}, {}); };
  GgufTensor t;
  t.name = std::string(64, 'n');
  t.ne = {1};
  t.pieces = {{0, 4, 0, 0, kVerbatim}};
  EXPECT_THROW(build(t), FormatError) << "names are under 64 bytes";
  t.name = "x";
  t.ne = {1, 1, 1, 1, 1};
  EXPECT_THROW(build(t), FormatError) << "at most 4 dims";
  t.ne = {30};
  t.type = GgmlType::kQ8_0;
  EXPECT_THROW(build(t), FormatError) << "rows of whole blocks";
  t.ne = {2};
  t.type = GgmlType::kF32;
  t.pieces = {{0, 4, 0, 0, kVerbatim}};
  try {
    build(t);
    ADD_FAILURE() << "pieces short of the tensor";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'x'"), std::string::npos) << e.what();
  }
}

TEST(GgufTensorsTest, LlamaPermutationInterleavesTheHalvesOfEachHead) {
  std::vector<uint64_t> rows;
  for (uint64_t r = 0; r < 16; ++r) rows.push_back(LlamaPermutedRow(r, 16, 2));
  EXPECT_EQ(rows, (std::vector<uint64_t>{0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15}));
}

GgufConfig Config(const std::string& arch) {
  return ParseGgufConfig(nlohmann::json({{"architectures", {arch}},
                                         {"hidden_size", 64},
                                         {"num_hidden_layers", 2},
                                         {"num_attention_heads", 4},
                                         {"vocab_size", 10}})
                             .dump(),
                         "config.json");
}

TEST(GgufTensorsTest, NamesMapDropOrRefuseAsTheConverterDoes) {
  const GgufConfig llama = Config("LlamaForCausalLM");
  EXPECT_EQ(GgufTensorName(llama, "model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(GgufTensorName(llama, "lm_head.weight"), "output.weight");
  EXPECT_EQ(GgufTensorName(llama, "model.layers.11.self_attn.k_proj.weight"), "blk.11.attn_k.weight");
  EXPECT_EQ(GgufTensorName(llama, "model.layers.0.mlp.down_proj.weight"), "blk.0.ffn_down.weight");
  EXPECT_EQ(GgufTensorName(llama, "model.layers.0.post_attention_layernorm.weight"),
            "blk.0.ffn_norm.weight");
  EXPECT_EQ(GgufTensorName(llama, "language_model.model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(GgufTensorName(llama, "model.layers.0.self_attn.rotary_emb.inv_freq"), std::nullopt);
  EXPECT_EQ(GgufTensorName(llama, "vision_tower.blocks.0.weight"), std::nullopt);
  EXPECT_THROW(GgufTensorName(llama, "model.layers.0.self_attn.q_norm.weight"), FormatError)
      << "LLaMA has no Q norm";
  EXPECT_THROW(GgufTensorName(llama, "model.layers.x.mlp.up_proj.weight"), FormatError);
  EXPECT_THROW(GgufTensorName(llama, "transformer.h.0.attn.c_attn.weight"), FormatError);
  const GgufConfig qwen3 = Config("Qwen3ForCausalLM");
  EXPECT_EQ(GgufTensorName(qwen3, "model.layers.1.self_attn.q_norm.weight"), "blk.1.attn_q_norm.weight");
  EXPECT_EQ(qwen3.head_dim, 128u) << "Qwen3Config's default head_dim";
  const GgufConfig phi3 = Config("Phi3ForCausalLM");
  EXPECT_EQ(GgufTensorName(phi3, "model.layers.2.self_attn.qkv_proj.weight"), "blk.2.attn_qkv.weight");
  EXPECT_EQ(GgufTensorName(phi3, "model.layers.2.mlp.gate_up_proj.weight"), "blk.2.ffn_up.weight");
  EXPECT_EQ(GgufTensorName(phi3, "model.vision_tower.x.weight"), std::nullopt);
  EXPECT_THROW(GgufTensorName(phi3, "model.layers.0.mlp.gate_proj.weight"), FormatError)
      << "Phi-3's tensor map has no separate gate";
  EXPECT_THROW(GgufTensorName(llama, "model.layers.0.self_attn.qkv_proj.weight"), FormatError);
  EXPECT_THROW(Config("GPTNeoXForCausalLM"), FormatError);
  const GgufConfig gemma2 = Config("Gemma2ForCausalLM");
  const GgufConfig gemma3 = Config("Gemma3ForConditionalGeneration");
  EXPECT_EQ(GgufTensorName(gemma2, "lm_head.weight"), std::nullopt) << "llama.cpp ties it";
  EXPECT_EQ(GgufTensorName(gemma2, "model.layers.1.post_attention_layernorm.weight"),
            "blk.1.post_attention_norm.weight");
  EXPECT_EQ(GgufTensorName(gemma2, "model.layers.1.pre_feedforward_layernorm.weight"),
            "blk.1.ffn_norm.weight");
  EXPECT_EQ(GgufTensorName(gemma2, "model.layers.1.post_feedforward_layernorm.weight"),
            "blk.1.post_ffw_norm.weight");
  EXPECT_THROW(GgufTensorName(gemma2, "model.layers.0.self_attn.q_norm.weight"), FormatError);
  EXPECT_EQ(GgufTensorName(gemma3, "model.language_model.layers.0.self_attn.q_norm.weight"),
            "blk.0.attn_q_norm.weight");
  EXPECT_EQ(GgufTensorName(gemma3, "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"),
            std::nullopt);
  EXPECT_EQ(GgufTensorName(gemma3, "model.multi_modal_projector.mm_input_projection_weight"),
            std::nullopt);
  EXPECT_EQ(gemma3.head_dim, 256u) << "Gemma3TextConfig's default head_dim";
}

// Gemma 2's own key list and Gemma 3's additions after the generic keys (§2.8).
TEST(GgufArchTest, GemmaKeysAsTheConverterWritesThem) {
  auto keys = [](const nlohmann::json& config) {
    GgufMetadata kv;
    AddArchitectureKeys(ParseGgufConfig(config.dump(), "config.json"), "g", 1, 1000, kv);
    const FilePlan plan = BuildGgufPlan(kv, {}, {});
    const GgufFile file = ReadGgufFile(
        [&](uint64_t at, uint64_t n) { return plan.prefix.substr(at, n); }, plan.prefix.size(), "g.gguf");
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [key, value] : file.kv) out.push_back({key, value});
    return out;
  };
  const nlohmann::json gemma2 = keys({{"architectures", {"Gemma2ForCausalLM"}}, {"hidden_size", 2304},
                                      {"intermediate_size", 9216}, {"num_hidden_layers", 26},
                                      {"num_attention_heads", 8}, {"num_key_value_heads", 4}});
  EXPECT_EQ(gemma2, nlohmann::json::parse(R"([
      ["general.architecture", "gemma2"], ["general.type", "model"], ["general.name", "g"],
      ["general.size_label", "1.0K"], ["gemma2.context_length", 8192],
      ["gemma2.embedding_length", 2304], ["gemma2.block_count", 26],
      ["gemma2.feed_forward_length", 9216], ["gemma2.attention.head_count", 8],
      ["gemma2.attention.head_count_kv", 4],
      ["gemma2.attention.layer_norm_rms_epsilon", 9.999999974752427e-07],
      ["gemma2.attention.key_length", 256], ["gemma2.attention.value_length", 256],
      ["general.file_type", 1], ["gemma2.attn_logit_softcapping", 50.0],
      ["gemma2.final_logit_softcapping", 30.0], ["gemma2.attention.sliding_window", 4096],
      ["general.quantization_version", 2]])"));
  const nlohmann::json gemma3 = keys({{"architectures", {"Gemma3ForCausalLM"}}, {"hidden_size", 1152},
                                      {"intermediate_size", 6912}, {"num_hidden_layers", 26},
                                      {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                                      {"sliding_window", 512}, {"final_logit_softcapping", nullptr}});
  std::vector<std::string> names;
  for (const nlohmann::json& kv : gemma3) names.push_back(kv[0]);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "general.architecture", "general.type", "general.name", "general.size_label",
                       "gemma3.block_count", "gemma3.context_length", "gemma3.embedding_length",
                       "gemma3.feed_forward_length", "gemma3.attention.head_count",
                       "gemma3.attention.head_count_kv", "gemma3.rope.freq_base",
                       "gemma3.rope.freq_base_swa", "gemma3.attention.layer_norm_rms_epsilon",
                       "gemma3.attention.key_length", "gemma3.attention.value_length",
                       "general.file_type", "gemma3.attention.sliding_window",
                       "general.quantization_version"}));
  EXPECT_EQ(gemma3[5][1], 131072);
  EXPECT_EQ(gemma3[10][1], 1000000.0);
  EXPECT_EQ(gemma3[11][1], 10000.0);
  EXPECT_EQ(gemma3[16][1], 512);
}

// Gemma's norms: the codec writes 1 + w in F32 (from BF16 here).
TEST(GgufTensorsTest, GemmaNormsAreStoredAsOnePlusTheWeight) {
  TensorCodec codec;
  codec.from = SourceDtype::kBF16;
  codec.to = Encoding::kF32;
  codec.add_one = true;
  codec.cols = 3;
  const uint8_t bf16[6] = {0x80, 0x3f, 0x00, 0xbf, 0x00, 0x00};  // 1.0, -0.5, 0.0
  float values[3], out[3];
  DecodeElements(codec, codec::BestKernels(), {0, 3}, bf16, nullptr, values);
  std::vector<float> scratch;
  EncodeUnits(codec, codec::BestKernels(), 0, 3, values, 0.0f, scratch, reinterpret_cast<uint8_t*>(out));
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 0.5f);
  EXPECT_EQ(out[2], 1.0f);
}

// Phi-3's own key list (§2.7): partial rotary dimensions, a null sliding window written as 0,
// and for a long-context model the attention factor right after general.architecture and the
// RoPE factor tensors.
TEST(GgufArchTest, Phi3KeysAsItsConverterWritesThem) {
  nlohmann::json json = {{"architectures", {"Phi3ForCausalLM"}}, {"hidden_size", 3072},
                         {"intermediate_size", 8192}, {"num_hidden_layers", 32},
                         {"num_attention_heads", 24}, {"num_key_value_heads", 8},
                         {"partial_rotary_factor", 0.75}, {"max_position_embeddings", 131072},
                         {"original_max_position_embeddings", 4096}, {"sliding_window", nullptr},
                         {"vocab_size", 200064}};
  std::vector<float> factors(48, 1.5f);
  json["rope_scaling"] = {{"type", "longrope"}, {"long_factor", factors}, {"short_factor", factors}};
  const GgufConfig config = ParseGgufConfig(json.dump(), "config.json");
  EXPECT_EQ(config.rope_dims, 96u);  // int(0.75 * 3072) / 24
  GgufMetadata kv;
  AddArchitectureKeys(config, "phi-4-mini", 1, 3'800'000'000, kv);
  GgufMetadata want;
  want.String("general.architecture", "phi3");
  want.F32("phi3.rope.scaling.attn_factor", static_cast<float>(std::sqrt(1 + std::log(32.0) / std::log(4096.0))));
  want.String("general.type", "model");
  want.String("general.name", "phi-4-mini");
  want.String("general.size_label", "3.8B");
  want.U32("phi3.context_length", 131072);
  want.U32("phi3.rope.scaling.original_context_length", 4096);
  want.U32("phi3.embedding_length", 3072);
  want.U32("phi3.feed_forward_length", 8192);
  want.U32("phi3.block_count", 32);
  want.U32("phi3.attention.head_count", 24);
  want.U32("phi3.attention.head_count_kv", 8);
  want.F32("phi3.attention.layer_norm_rms_epsilon", 1e-5f);
  want.U32("phi3.rope.dimension_count", 96);
  want.F32("phi3.rope.freq_base", 10000.0f);
  want.U32("general.file_type", 1);
  want.U32("phi3.attention.sliding_window", 0);
  want.U32("general.quantization_version", 2);
  EXPECT_EQ(kv.Encode(), want.Encode());

  json["rope_scaling"]["short_factor"] = std::vector<float>(47, 1.0f);
  EXPECT_THROW(PlanGgufTensors(ShardSet{}, ParseGgufConfig(json.dump(), "config.json"),
                               GgufOuttype::kF16),
               FormatError)
      << "a factor list of the wrong length";
  json["rope_scaling"]["short_factor"] = factors;
  const GgufTensors planned =
      PlanGgufTensors(ShardSet{}, ParseGgufConfig(json.dump(), "config.json"), GgufOuttype::kF16);
  ASSERT_EQ(planned.tensors.size(), 2u);
  EXPECT_EQ(planned.tensors[0].name, "rope_factors_long.weight");
  EXPECT_EQ(planned.tensors[1].name, "rope_factors_short.weight");
  EXPECT_EQ(planned.tensors[0].ne, (std::vector<uint64_t>{48}));
  float first;
  std::memcpy(&first, planned.tensors[0].inline_bytes.data(), 4);
  EXPECT_EQ(first, 1.5f);
}

TEST(GgufArchTest, GeneralNamesThatWouldTurnOnPhi3TokenHandlingAreRewritten) {
  EXPECT_EQ(LoadableGeneralName("Phi-3.5-mini-instruct"), "Phi_3.5-mini-instruct");
  EXPECT_EQ(LoadableGeneralName("my-PHI3-tune"), "my-PHI_3-tune");
  EXPECT_EQ(LoadableGeneralName("phi-4"), "phi-4");
  EXPECT_EQ(LoadableGeneralName("phi"), "phi");
}

TEST(GgufArchTest, SizeLabelsAsTheConverterWritesThem) {
  EXPECT_EQ(SizeLabel(8'030'000'000), "8.0B");
  EXPECT_EQ(SizeLabel(494'000'000), "494M");
  EXPECT_EQ(SizeLabel(14'700'000'000), "15B");
  EXPECT_EQ(SizeLabel(1'240'000'000), "1.2B");
  EXPECT_EQ(SizeLabel(360'000), "360K");
}

nlohmann::json SplitThenByteLevel(const std::string& regex, bool ignore_merges) {
  return {{"model", {{"type", "BPE"}, {"ignore_merges", ignore_merges}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}},
              {{"type", "ByteLevel"}, {"use_regex", false}}}}}}};
}

TEST(GgufVocabTest, PreTokenizersAreKnownByTheirStructure) {
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string qwen2 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  EXPECT_EQ(ClassifyPreTokenizer(SplitThenByteLevel(llama3, true)).name, "llama-bpe");
  EXPECT_EQ(ClassifyPreTokenizer(SplitThenByteLevel(llama3, false)).name, "dbrx");
  EXPECT_EQ(ClassifyPreTokenizer(SplitThenByteLevel(qwen2, false)).name, "qwen2");
  EXPECT_EQ(ClassifyPreTokenizer({{"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}}}).name,
            "gpt-2");
  // o200k and tekken, as llama.cpp's vocabulary code quotes them from tokenizer.json.
  const std::string upper = R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)";
  const std::string lower = R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)";
  const std::string contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?";
  const std::string tail = R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(ClassifyPreTokenizer(SplitThenByteLevel(upper + contractions + "|" + lower + contractions +
                                                        R"(|\p{N}{1,3}|)" + tail, false)).name,
            "gpt-4o");
  EXPECT_EQ(ClassifyPreTokenizer(SplitThenByteLevel(upper + "|" + lower + R"(|\p{N}|)" + tail, true)).name,
            "tekken");
  PreTokenizer unknown = ClassifyPreTokenizer(SplitThenByteLevel("\\s+", false));
  EXPECT_EQ(unknown.name, "");
  EXPECT_NE(unknown.reason.find("\\\\s+"), std::string::npos) << unknown.reason;
  EXPECT_EQ(ClassifyPreTokenizer({{"pre_tokenizer", {{"type", "Metaspace"}}}}).name, "");
}

std::string FromHex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

// Protobuf pieces: varints and fields, as sentencepiece writes them.
std::string Varint(uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}
std::string Field(uint32_t number, uint32_t wire, const std::string& payload) {
  return Varint(number << 3 | wire) + (wire == 2 ? Varint(payload.size()) : "") + payload;
}
std::string Piece(const std::string& text, float score, int type) {
  std::string raw(4, '\0');
  std::memcpy(raw.data(), &score, 4);
  std::string piece = Field(1, 2, text) + Field(2, 5, raw);
  if (type != 1) piece += Field(3, 0, Varint(type));
  return Field(1, 2, piece);
}

TEST(SentencePieceTest, ReadsThePiecesAndNamesWhatIsBroken) {
  const std::string model = Piece("<unk>", 0, 2) + Field(2, 2, Field(3, 0, Varint(2))) +
                            Piece("<s>", 0, 3) + Piece("\xe2\x96\x81the", -1.5f, 1) +
                            Piece("<x>", -2, 4) + Field(3, 2, Field(3, 0, Varint(1)));
  const std::vector<SentencePiece> pieces = ParseSentencePieceModel(model, "tokenizer.model");
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].piece, "<unk>");
  EXPECT_EQ(pieces[0].type, SentencePiece::kUnknown);
  EXPECT_EQ(pieces[2].piece, "\xe2\x96\x81the");
  EXPECT_EQ(pieces[2].score, -1.5f);
  EXPECT_EQ(pieces[2].type, SentencePiece::kNormal) << "an absent type is NORMAL";
  EXPECT_EQ(pieces[3].type, SentencePiece::kUserDefined);
  auto error = [](const std::string& bytes) {
    try {
      ParseSentencePieceModel(bytes, "tokenizer.model");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error(model.substr(0, model.size() - 3)).find("runs past the end"), std::string::npos);
  EXPECT_NE(error(Piece("a", 0, 9)).find("piece 0 has type 9"), std::string::npos);
  EXPECT_NE(error(Field(1, 2, Field(2, 5, "1234"))).find("piece 0 has no text"), std::string::npos);
  EXPECT_NE(error(std::string("\x0b")).find("wire type 3"), std::string::npos);
  EXPECT_NE(error(std::string(11, '\xff')).find("varint"), std::string::npos);
  EXPECT_NE(error(Field(2, 2, "")).find("without pieces"), std::string::npos);
  EXPECT_EQ(error(model), "accepted");
}

// The converter's SentencePiece vocabulary (§4.3): pieces by id, user-defined pieces typed
// normal, [PAD] to vocab_size, added_tokens_decoder's tokens (control when special or looking
// special, else user-defined with U+2581 as a space) at score -1000, ids from config.json.
TEST(SentencePieceTest, VocabularyAsTheConverterBuildsIt) {
  GgufConfig config = ParseGgufConfig(
      nlohmann::json({{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 8},
                      {"bos_token_id", 1}, {"eos_token_id", 2}, {"pad_token_id", 9}})
          .dump(),
      "config.json");
  ModelTexts texts;
  texts["tokenizer.model"] = Piece("<unk>", 0, 2) + Piece("<s>", 0, 3) + Piece("</s>", 0, 3) +
                             Piece("<0x0A>", 0, 6) + Piece("\xe2\x96\x81" "a", -1, 1) +
                             Piece("<u>", -2, 4);
  texts["tokenizer_config.json"] = nlohmann::json(
      {{"add_bos_token", true}, {"add_prefix_space", false},
       {"added_tokens_decoder", {{"6", {{"content", "<|im_end|>"}}},
                                 {"5", {{"content", "\xe2\x96\x81x"}, {"special", false}}},
                                 {"12", {{"content", "<far>"}, {"special", true}}}}}}).dump();
  GgufMetadata kv;
  kv.String("general.architecture", "llama");
  AddTokenizerKeys(config, texts, 8, kv);
  const FilePlan plan = BuildGgufPlan(kv, {}, {});
  const GgufFile file = ReadGgufFile([&](uint64_t at, uint64_t n) { return plan.prefix.substr(at, n); },
                                     plan.prefix.size(), "v.gguf");
  ASSERT_TRUE(file.problems.empty()) << file.problems.front();
  std::vector<std::string> keys;
  for (const auto& [key, value] : file.kv) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "general.architecture", "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.model", "tokenizer.ggml.pre",
                      "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                      "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                      "tokenizer.ggml.add_bos_token"}))
      << "the pad id 9 is past the vocabulary: skipped";
  EXPECT_EQ(*file.Find("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*file.Find("tokenizer.ggml.pre"), "default");
  EXPECT_EQ((*file.Find("tokenizer.ggml.tokens"))["values"],
            nlohmann::json({"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81" "a", " x", "<|im_end|>",
                            "[PAD7]"}));
  EXPECT_EQ((*file.Find("tokenizer.ggml.token_type"))["values"],
            nlohmann::json({2, 3, 3, 6, 1, 4, 3, 5}));
  EXPECT_EQ((*file.Find("tokenizer.ggml.scores"))["values"],
            nlohmann::json({0.0, 0.0, 0.0, 0.0, -1.0, -1000.0, -1000.0, -10000.0}));
  EXPECT_EQ(*file.Find("tokenizer.ggml.add_space_prefix"), false);
  EXPECT_EQ(*file.Find("tokenizer.ggml.add_bos_token"), true);
}

// ggml's quantize_row_*_ref, byte for byte, on the golden rows (tests/data/gguf-qvectors.json:
// produced by the ggml reference functions), through the codec as a view encodes a row of 512.
TEST(GgmlQuantsTest, EncodersMatchTheGgmlReferenceOnTheGoldenRows) {
  std::ifstream in(std::string(APRFS_TEST_DATA_DIR) + "/gguf-qvectors.json");
  ASSERT_TRUE(in) << "tests/data/gguf-qvectors.json";
  const nlohmann::json vectors = nlohmann::json::parse(in);
  ASSERT_GE(vectors["cases"].size(), 3u);
  for (const nlohmann::json& c : vectors["cases"]) {
    for (auto [key, encoding] : {std::pair{"q8_0", Encoding::kGgmlQ8_0},
                                 std::pair{"q4_K", Encoding::kGgmlQ4K},
                                 std::pair{"q6_K", Encoding::kGgmlQ6K}}) {
      SCOPED_TRACE(c["name"].get<std::string>() + " " + key);
      const std::string input = FromHex(c["input_f32_le_hex"]);
      const std::string want = FromHex(c[key]);
      std::vector<float> values(input.size() / 4);
      std::memcpy(values.data(), input.data(), input.size());
      TensorCodec codec;
      codec.from = SourceDtype::kF32;
      codec.to = encoding;
      codec.cols = values.size();
      ASSERT_EQ(EncodedSize(codec), want.size());
      std::string got(want.size(), '\0');
      std::vector<float> scratch;
      EncodeUnits(codec, codec::BestKernels(), 0, UnitCount(codec), values.data(), 0.0f, scratch,
                  reinterpret_cast<uint8_t*>(got.data()));
      EXPECT_EQ(got, want);
    }
  }
}

// A tensor of the F16 plan: F16 (F32 for 1-D), one verbatim piece.
GgufTensor F16Tensor(const std::string& name, std::vector<uint64_t> ne) {
  GgufTensor t;
  t.name = name;
  t.ne = std::move(ne);
  t.type = t.ne.size() == 1 ? GgmlType::kF32 : GgmlType::kF16;
  t.pieces.push_back({0, t.bytes(), 0, 0, kVerbatim});
  return t;
}

// A model of `layers` layers of width `width` (ffn_down rows of `ffn`), in converter order.
GgufTensors F16Model(uint32_t layers, uint64_t width, uint64_t ffn, bool tied) {
  GgufTensors model;
  model.tensors.push_back(F16Tensor("token_embd.weight", {width, 1000}));
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    model.tensors.push_back(F16Tensor(p + "attn_norm.weight", {width}));
    model.tensors.push_back(F16Tensor(p + "attn_q.weight", {width, width}));
    model.tensors.push_back(F16Tensor(p + "attn_v.weight", {width, width / 4}));
    model.tensors.push_back(F16Tensor(p + "ffn_down.weight", {ffn, width}));
  }
  model.tensors.push_back(F16Tensor("output_norm.weight", {width}));
  if (!tied) model.tensors.push_back(F16Tensor("output.weight", {width, 1000}));
  return model;
}

std::map<std::string, std::string> TypesOf(const GgufTensors& model) {
  std::map<std::string, std::string> types;
  for (const GgufTensor& t : model.tensors) types[t.name] = std::string(GgmlTypeName(t.type));
  return types;
}

// llama-quantize's Q4_K_M choices (llama-quant.cpp of the llama.cpp node-llama-cpp ships; the
// FUSE test checks the bytes against it on small models): use_more_bits over 32 layers, the
// tied and untied embedding, 70B attn_v, the block-size fallbacks, sizes and order.
TEST(GgufQuantizeTest, Q4_K_MTypesFollowLlamaQuantize) {
  GgufConfig config;
  config.block_count = 32;
  config.head_count = 32;
  config.head_count_kv = 8;
  GgufTensors model = F16Model(32, 4096, 14336, false);
  QuantizeQ4_K_M(config, model);
  EXPECT_EQ(model.file_type, 15u);
  std::map<std::string, std::string> types = TypesOf(model);
  EXPECT_EQ(types["token_embd.weight"], "Q4_K");
  EXPECT_EQ(types["output.weight"], "Q6_K");
  EXPECT_EQ(types["output_norm.weight"], "F32");
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2.
  for (int i = 0; i < 32; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const bool more = i < 4 || i >= 28 || (i - 4) % 3 == 2;
    EXPECT_EQ(types[p + "attn_v.weight"], more ? "Q6_K" : "Q4_K") << i;
    EXPECT_EQ(types[p + "ffn_down.weight"], more ? "Q6_K" : "Q4_K") << i;
    EXPECT_EQ(types[p + "attn_q.weight"], "Q4_K");
    EXPECT_EQ(types[p + "attn_norm.weight"], "F32");
  }
  // Sorted by layer (numerically), then name; the others first.
  EXPECT_EQ(model.tensors[0].name, "output.weight");
  EXPECT_EQ(model.tensors[1].name, "output_norm.weight");
  EXPECT_EQ(model.tensors[2].name, "token_embd.weight");
  EXPECT_EQ(model.tensors[3].name, "blk.0.attn_norm.weight");
  EXPECT_EQ(model.tensors[7].name, "blk.1.attn_norm.weight");
  EXPECT_EQ(model.tensors.back().name, "blk.31.ffn_down.weight");
  // Every re-encoded piece: its new size, one codec reading the same source run.
  for (const GgufTensor& t : model.tensors) {
    ASSERT_EQ(t.pieces.size(), 1u) << t.name;
    EXPECT_EQ(t.pieces[0].length, t.bytes()) << t.name;
    if (t.type == GgmlType::kF32) continue;
    const TensorCodec& codec = model.codecs.at(t.pieces[0].codec);
    EXPECT_EQ(codec.from, SourceDtype::kF16) << t.name;
    EXPECT_EQ(codec.cols, t.elements()) << t.name;
    EXPECT_EQ(EncodedSize(codec), t.bytes()) << t.name;
  }

  // Tied: the embedding is the output, Q6_K. Qwen2-0.5B's 896-wide rows: Q5_0 and Q8_0.
  GgufTensors narrow = F16Model(24, 896, 4864, true);
  config.block_count = 24;
  QuantizeQ4_K_M(config, narrow);
  types = TypesOf(narrow);
  EXPECT_EQ(types["token_embd.weight"], "Q8_0");
  EXPECT_EQ(types["blk.0.attn_q.weight"], "Q5_0");
  EXPECT_EQ(types["blk.0.attn_v.weight"], "Q8_0");  // Q6_K falls back to Q8_0
  EXPECT_EQ(types["blk.0.ffn_down.weight"], "Q6_K");  // 4864 = 19 x 256
  EXPECT_EQ(types["blk.1.ffn_down.weight"], "Q6_K");
  EXPECT_EQ(types["blk.4.ffn_down.weight"], "Q4_K");
  GgufTensors wide = F16Model(2, 256, 512, true);
  config.block_count = 2;
  QuantizeQ4_K_M(config, wide);
  EXPECT_EQ(TypesOf(wide)["token_embd.weight"], "Q6_K");
  GgufTensors odd = F16Model(2, 80, 160, false);  // rows of 80: not whole Q8_0 blocks
  QuantizeQ4_K_M(config, odd);
  EXPECT_EQ(TypesOf(odd)["blk.0.attn_q.weight"], "F16");
  EXPECT_EQ(TypesOf(odd)["output.weight"], "F16");

  // A 70B LLaMA (80 layers, grouped-query): the attn_v that use_more_bits skips are Q5_K.
  GgufTensors big = F16Model(80, 8192, 28672, false);
  config.block_count = 80;
  config.head_count = 64;
  config.head_count_kv = 8;
  QuantizeQ4_K_M(config, big);
  types = TypesOf(big);
  EXPECT_EQ(types["blk.0.attn_v.weight"], "Q6_K");
  EXPECT_EQ(types["blk.10.attn_v.weight"], "Q5_K");
  EXPECT_EQ(types["blk.10.ffn_down.weight"], "Q4_K");
}

// llama-quantize sets general.quantization_version and general.file_type again: they move to
// the end of the KVs.
TEST(GgufQuantizeTest, QuantizeKeysMoveToTheEnd) {
  GgufMetadata kv;
  kv.String("general.architecture", "llama");
  kv.U32("general.file_type", 1);
  kv.U32("general.quantization_version", 2);
  kv.String("tokenizer.ggml.model", "gpt2");
  ResetQuantizeKeys(15, kv);
  GgufMetadata want;
  want.String("general.architecture", "llama");
  want.String("tokenizer.ggml.model", "gpt2");
  want.U32("general.quantization_version", 2);
  want.U32("general.file_type", 15);
  EXPECT_EQ(kv.Encode(), want.Encode());
}

}  // namespace
}  // namespace aprfs
