// Metadata JSON as aprender's newest writer spells it (apr-v2-format.md §4.2, §4.5), config.json
// parsing with aprender's alias rules and the embedded tokenizer (notes/aprender-import.md §2-3).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "format/apr/apr_metadata.h"
#include "format/error.h"
#include "format/apr/json_spelling.h"
#include "format/model/model_config.h"
#include "format/model/tokenizer_embed.h"

namespace aprfs {
namespace {

using nlohmann::json;

constexpr const char* kMinimal =
    R"({"model_type":"","license":null,"data_source":null,"data_license":null,)"
    R"("total_size":0,"param_count":0})";

// ---------------------------------------------------------------------------------------------
// SerializeAprMetadata: key order and omission rules.

TEST(AprMetadataJson, MinimalHasOnlyTheAlwaysEmittedKeys) {
  EXPECT_EQ(SerializeAprMetadata(AprMetadata{}), kMinimal);
}

TEST(AprMetadataJson, EveryFieldInSpecOrder) {
  AprMetadata m;
  m.model_type = "Llama";
  m.name = "n";
  m.description = "d";
  m.author = "a";
  m.license = "MIT";
  m.version = "1.0";
  m.source = "hf://o/n";
  m.original_format = "safetensors";
  m.created_at = "2026";
  m.total_size = 7;
  m.param_count = 8;
  m.architecture = "llama";
  m.hf_architecture = "LlamaForCausalLM";
  m.hf_model_type = "llama";
  m.hidden_size = 1;
  m.num_layers = 2;
  m.num_heads = 3;
  m.num_kv_heads = 4;
  m.vocab_size = 5;
  m.intermediate_size = 6;
  m.max_position_embeddings = 7;
  m.rope_theta = 10000.0f;
  m.rope_type = 2;
  m.rms_norm_eps = 1e-6f;
  m.head_dim = 9;
  m.num_experts = 10;
  m.num_experts_per_tok = 11;
  m.moe_intermediate_size = 12;
  m.custom["zeta"] = "1";
  m.custom["alpha"] = "[1,2]";
  m.custom["tokenizer.vocab_size"] = "3";
  EXPECT_EQ(SerializeAprMetadata(m),
            R"({"model_type":"Llama","name":"n","description":"d","author":"a","license":"MIT",)"
            R"("data_source":null,"data_license":null,"version":"1.0","source":"hf://o/n",)"
            R"("original_format":"safetensors","created_at":"2026","total_size":7,)"
            R"("param_count":8,"architecture":"llama","hf_architecture":"LlamaForCausalLM",)"
            R"("hf_model_type":"llama","hidden_size":1,"num_layers":2,"num_heads":3,)"
            R"("num_kv_heads":4,"vocab_size":5,"intermediate_size":6,)"
            R"("max_position_embeddings":7,"rope_theta":10000.0,"rope_type":2,)"
            R"("rms_norm_eps":0.000001,"head_dim":9,"num_experts":10,"num_experts_per_tok":11,)"
            R"("moe_intermediate_size":12,"alpha":[1,2],"tokenizer.vocab_size":3,"zeta":1})");
}

TEST(AprMetadataJson, EachOptionalFieldIsOmittedWhenUnset) {
  // Setting one field at a time adds exactly that key, in its place.
  struct Case {
    void (*set)(AprMetadata&);
    const char* key_value;
    const char* after;  // the key it follows
  };
  const Case cases[] = {
      {[](AprMetadata& m) { m.name = "x"; }, R"("name":"x")", R"("model_type":"")"},
      {[](AprMetadata& m) { m.description = "x"; }, R"("description":"x")", R"("model_type":"")"},
      {[](AprMetadata& m) { m.author = "x"; }, R"("author":"x")", R"("model_type":"")"},
      {[](AprMetadata& m) { m.version = "x"; }, R"("version":"x")", R"("data_license":null)"},
      {[](AprMetadata& m) { m.source = "x"; }, R"("source":"x")", R"("data_license":null)"},
      {[](AprMetadata& m) { m.original_format = "x"; }, R"("original_format":"x")",
       R"("data_license":null)"},
      {[](AprMetadata& m) { m.created_at = "x"; }, R"("created_at":"x")", R"("data_license":null)"},
      {[](AprMetadata& m) { m.architecture = "x"; }, R"("architecture":"x")", R"("param_count":0)"},
      {[](AprMetadata& m) { m.hf_architecture = "x"; }, R"("hf_architecture":"x")",
       R"("param_count":0)"},
      {[](AprMetadata& m) { m.hf_model_type = "x"; }, R"("hf_model_type":"x")",
       R"("param_count":0)"},
      {[](AprMetadata& m) { m.hidden_size = 0; }, R"("hidden_size":0)", R"("param_count":0)"},
      {[](AprMetadata& m) { m.vocab_size = 151936; }, R"("vocab_size":151936)",
       R"("param_count":0)"},
      {[](AprMetadata& m) { m.rope_type = 0; }, R"("rope_type":0)", R"("param_count":0)"},
      {[](AprMetadata& m) { m.head_dim = 128; }, R"("head_dim":128)", R"("param_count":0)"},
      {[](AprMetadata& m) { m.custom["k"] = "null"; }, R"("k":null)", R"("param_count":0)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key_value);
    AprMetadata m;
    c.set(m);
    std::string text = SerializeAprMetadata(m);
    std::string without = text;
    size_t at = without.find(std::string(",") + c.key_value);
    ASSERT_NE(at, std::string::npos) << text;
    without.erase(at, std::string(c.key_value).size() + 1);
    EXPECT_EQ(without, kMinimal) << text;
    EXPECT_EQ(text.find(std::string(c.after) + "," + c.key_value) != std::string::npos, true)
        << text;
  }
  AprMetadata licensed;
  licensed.license = "apache-2.0";
  EXPECT_EQ(SerializeAprMetadata(licensed),
            R"({"model_type":"","license":"apache-2.0","data_source":null,"data_license":null,)"
            R"("total_size":0,"param_count":0})");
}

TEST(AprMetadataJson, LargeIntegersArePlainDecimal) {
  AprMetadata m;
  m.param_count = 14659507200;
  m.total_size = std::numeric_limits<uint64_t>::max();
  std::string text = SerializeAprMetadata(m);
  EXPECT_NE(text.find("\"param_count\":14659507200"), std::string::npos) << text;
  EXPECT_NE(text.find("\"total_size\":18446744073709551615"), std::string::npos) << text;
}

TEST(AprMetadataJson, OutputIsValidJsonWithEscapedStrings) {
  AprMetadata m;
  m.model_type = "q\"b\\s";
  m.name = std::string("ctl\x01\x1f\n\t/\xc3\xa9\x7f", 11);
  std::string text = SerializeAprMetadata(m);
  EXPECT_NE(text.find(R"("model_type":"q\"b\\s")"), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\":\"ctl\\u0001\\u001f\\n\\t/\xc3\xa9\x7f\""), std::string::npos)
      << text;
  json parsed = json::parse(text);
  EXPECT_EQ(parsed.at("name"), *m.name);
  EXPECT_EQ(parsed.at("model_type"), m.model_type);
}

// ---------------------------------------------------------------------------------------------
// f32 / f64 spelling (serde_json + Ryu).

std::string F32(float v) {
  std::string out;
  AppendJsonF32(out, v);
  return out;
}

std::string F64(double v) {
  std::string out;
  AppendJsonF64(out, v);
  return out;
}

TEST(JsonSpelling, F32LikeSerde) {
  EXPECT_EQ(F32(10000.0f), "10000.0");
  EXPECT_EQ(F32(500000.0f), "500000.0");
  EXPECT_EQ(F32(1000000.0f), "1000000.0");
  EXPECT_EQ(F32(1e12f), "1000000000000.0");
  EXPECT_EQ(F32(1e13f), "1e13");
  EXPECT_EQ(F32(1.5e13f), "1.5e13");
  EXPECT_EQ(F32(12.34f), "12.34");
  EXPECT_EQ(F32(1e-5f), "0.00001");
  EXPECT_EQ(F32(1e-6f), "0.000001");
  EXPECT_EQ(F32(1.234e-6f), "0.000001234");
  EXPECT_EQ(F32(1e-7f), "1e-7");
  EXPECT_EQ(F32(1.234e-7f), "1.234e-7");
  EXPECT_EQ(F32(3.4e38f), "3.4e38");
  EXPECT_EQ(F32(std::numeric_limits<float>::max()), "3.4028235e38");
  EXPECT_EQ(F32(1.0f), "1.0");
  EXPECT_EQ(F32(0.5f), "0.5");
  EXPECT_EQ(F32(0.1f), "0.1");
  EXPECT_EQ(F32(0.0f), "0.0");
  EXPECT_EQ(F32(-0.0f), "-0.0");
  EXPECT_EQ(F32(-1.5f), "-1.5");
  EXPECT_EQ(F32(-1e-7f), "-1e-7");
  EXPECT_EQ(F32(1e-45f), "1e-45");
  EXPECT_EQ(F32(123456.78f), "123456.78");
  EXPECT_EQ(F32(std::nanf("")), "null");
  EXPECT_EQ(F32(std::numeric_limits<float>::infinity()), "null");
  EXPECT_EQ(F32(-std::numeric_limits<float>::infinity()), "null");
}

TEST(JsonSpelling, F64LikeSerde) {
  EXPECT_EQ(F64(static_cast<double>(1e-6f)), "9.999999974752427e-7");
  EXPECT_EQ(F64(0.1), "0.1");
  EXPECT_EQ(F64(1e15), "1000000000000000.0");
  EXPECT_EQ(F64(1e16), "1e16");
  EXPECT_EQ(F64(1e-5), "0.00001");
  EXPECT_EQ(F64(1e-6), "1e-6");
  EXPECT_EQ(F64(-3.25), "-3.25");
  EXPECT_EQ(F64(0.0), "0.0");
  EXPECT_EQ(F64(std::nan("")), "null");
}

TEST(JsonSpelling, F32FieldsInMetadata) {
  struct Case {
    float theta, eps;
    const char* theta_text;
    const char* eps_text;
  };
  const Case cases[] = {{10000.0f, 1e-5f, "10000.0", "0.00001"},
                        {500000.0f, 1e-6f, "500000.0", "0.000001"},
                        {1e13f, 1e-7f, "1e13", "1e-7"},
                        {12.34f, 1.234e-7f, "12.34", "1.234e-7"},
                        {3.4e38f, 1e-5f, "3.4e38", "0.00001"}};
  for (const Case& c : cases) {
    AprMetadata m;
    m.rope_theta = c.theta;
    m.rms_norm_eps = c.eps;
    std::string text = SerializeAprMetadata(m);
    EXPECT_NE(text.find(std::string("\"rope_theta\":") + c.theta_text + ","), std::string::npos)
        << text;
    EXPECT_NE(text.find(std::string("\"rms_norm_eps\":") + c.eps_text + "}"), std::string::npos)
        << text;
  }
}

std::string Str(std::string_view s) {
  std::string out;
  AppendJsonString(out, s);
  return out;
}

TEST(JsonSpelling, StringEscapes) {
  EXPECT_EQ(Str("plain"), "\"plain\"");
  EXPECT_EQ(Str("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(Str("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(Str("\n"), "\"\\n\"");
  EXPECT_EQ(Str("\t\r\b\f"), "\"\\t\\r\\b\\f\"");
  EXPECT_EQ(Str("\x01"), "\"\\u0001\"");
  EXPECT_EQ(Str("\x1f"), "\"\\u001f\"");  // lowercase hex
  EXPECT_EQ(Str("\x0b"), "\"\\u000b\"");
  EXPECT_EQ(Str(std::string_view("\0", 1)), "\"\\u0000\"");
  EXPECT_EQ(Str("a/b"), "\"a/b\"");        // '/' is not escaped
  EXPECT_EQ(Str("\x7f"), "\"\x7f\"");      // DEL is raw
  EXPECT_EQ(Str("\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80"),
            "\"\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\"");  // non-ASCII raw
  EXPECT_EQ(Str("<|eot_id|>"), "\"<|eot_id|>\"");
  EXPECT_EQ(Str(""), "\"\"");
}

// ---------------------------------------------------------------------------------------------
// ParseModelConfig.

ModelConfig Config(const std::string& text) { return ParseModelConfig(text, "config.json"); }

TEST(ModelConfigParse, FirstPresentAliasWinsEvenIfNull) {
  ModelConfig c = Config(R"({"hidden_size":null,"n_embd":768})");
  EXPECT_FALSE(c.hidden_size.has_value());
  EXPECT_FALSE(c.intermediate_size.has_value());  // 4 x an absent hidden size

  ModelConfig f = Config(R"({"hidden_size":4096.0,"n_embd":768})");
  EXPECT_FALSE(f.hidden_size.has_value());

  ModelConfig s = Config(R"({"num_hidden_layers":"32","n_layer":12})");
  EXPECT_FALSE(s.num_layers.has_value());

  ModelConfig neg = Config(R"({"num_attention_heads":-1,"n_head":12})");
  EXPECT_FALSE(neg.num_heads.has_value());

  ModelConfig eps = Config(R"({"rms_norm_eps":null,"layer_norm_epsilon":1e-5})");
  EXPECT_FLOAT_EQ(eps.rms_norm_eps, 1e-6f);  // the default, not the alias

  ModelConfig theta = Config(R"({"rope_theta":null})");
  EXPECT_FLOAT_EQ(theta.rope_theta, 10000.0f);
}

TEST(ModelConfigParse, AliasKeys) {
  ModelConfig gpt2 = Config(
      R"({"n_embd":768,"n_layer":12,"n_head":12,"n_inner":3072,"n_positions":1024,)"
      R"("layer_norm_epsilon":1e-5,"vocab_size":50257})");
  EXPECT_EQ(gpt2.hidden_size, 768u);
  EXPECT_EQ(gpt2.num_layers, 12u);
  EXPECT_EQ(gpt2.num_heads, 12u);
  EXPECT_EQ(gpt2.num_kv_heads, 12u);
  EXPECT_EQ(gpt2.intermediate_size, 3072u);
  EXPECT_EQ(gpt2.max_position_embeddings, 1024u);
  EXPECT_EQ(gpt2.vocab_size, 50257u);
  EXPECT_FLOAT_EQ(gpt2.rms_norm_eps, 1e-5f);

  EXPECT_EQ(Config(R"({"n_embed":5})").hidden_size, 5u);
  EXPECT_EQ(Config(R"({"d_model":6})").hidden_size, 6u);
  EXPECT_EQ(Config(R"({"num_layers":7})").num_layers, 7u);
  EXPECT_EQ(Config(R"({"num_heads":8})").num_heads, 8u);
  EXPECT_EQ(Config(R"({"ffn_dim":9})").intermediate_size, 9u);
  EXPECT_EQ(Config(R"({"n_ctx":10})").max_position_embeddings, 10u);
  EXPECT_FLOAT_EQ(Config(R"({"layer_norm_eps":2e-5})").rms_norm_eps, 2e-5f);
  // The canonical key comes first even when written last.
  EXPECT_EQ(Config(R"({"n_embd":1,"hidden_size":2})").hidden_size, 2u);
  EXPECT_EQ(Config(R"({"num_local_experts":8,"num_experts":4})").num_experts, 8u);
  EXPECT_EQ(Config(R"({"n_routed_experts":256})").num_experts, 256u);
  EXPECT_EQ(Config(R"({"num_experts_per_token":2})").num_experts_per_tok, 2u);
  EXPECT_EQ(Config(R"({"moe_intermediate_size":1408,"head_dim":128})").moe_intermediate_size,
            1408u);
  EXPECT_EQ(Config(R"({"head_dim":128})").head_dim, 128u);
}

TEST(ModelConfigParse, Defaults) {
  ModelConfig c = Config("{}");
  EXPECT_FALSE(c.model_type.has_value());
  EXPECT_FALSE(c.hf_architecture.has_value());
  EXPECT_FALSE(c.hidden_size.has_value());
  EXPECT_FALSE(c.num_heads.has_value());
  EXPECT_FALSE(c.num_kv_heads.has_value());
  EXPECT_FALSE(c.intermediate_size.has_value());
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_type, 0u);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.bos_token_id.has_value());

  ModelConfig heads = Config(R"({"num_attention_heads":32,"hidden_size":4096})");
  EXPECT_EQ(heads.num_kv_heads, 32u);         // defaults to heads
  EXPECT_EQ(heads.intermediate_size, 16384u);  // defaults to 4 x hidden
  ModelConfig kv_null = Config(R"({"num_attention_heads":32,"num_key_value_heads":null})");
  EXPECT_EQ(kv_null.num_kv_heads, 32u);
  ModelConfig kv = Config(R"({"num_attention_heads":32,"num_key_value_heads":8})");
  EXPECT_EQ(kv.num_kv_heads, 8u);
  ModelConfig inter_null = Config(R"({"hidden_size":10,"intermediate_size":null})");
  EXPECT_EQ(inter_null.intermediate_size, 40u);

  ModelConfig d = DefaultModelConfig();
  EXPECT_FALSE(d.hidden_size.has_value());
  EXPECT_FLOAT_EQ(d.rope_theta, 10000.0f);
  EXPECT_TRUE(d.tie_word_embeddings);
}

TEST(ModelConfigParse, RopeType) {
  for (const char* neox : {"qwen2", "qwen2.5", "qwen", "qwen3", "qwen3_5", "qwen3.5", "phi",
                           "phi3", "phi4", "gpt-neox", "gpt_neox", "gptneox", "pythia"}) {
    EXPECT_EQ(Config(std::string("{\"model_type\":\"") + neox + "\"}").rope_type, 2u) << neox;
  }
  for (const char* norm : {"llama", "mistral", "gemma", "Qwen2", "PHI3", "qwen2_moe", "gpt2", ""}) {
    EXPECT_EQ(Config(std::string("{\"model_type\":\"") + norm + "\"}").rope_type, 0u) << norm;
  }
  EXPECT_EQ(Config(R"({"model_type":5})").rope_type, 0u);
}

TEST(ModelConfigParse, IdentityFields) {
  ModelConfig c = Config(R"({"model_type":"Qwen2","architectures":["Qwen2ForCausalLM","X"]})");
  EXPECT_EQ(c.model_type, "Qwen2");  // verbatim
  EXPECT_EQ(c.hf_architecture, "Qwen2ForCausalLM");
  EXPECT_FALSE(Config(R"({"architectures":[]})").hf_architecture.has_value());
  EXPECT_FALSE(Config(R"({"architectures":[1]})").hf_architecture.has_value());
  EXPECT_FALSE(Config(R"({"architectures":"Qwen2ForCausalLM"})").hf_architecture.has_value());
  EXPECT_FALSE(Config(R"({"model_type":null})").model_type.has_value());
}

TEST(ModelConfigParse, SpecialTokensAndTie) {
  ModelConfig c = Config(R"({"bos_token_id":128000,"eos_token_id":[128001,128009]})");
  EXPECT_EQ(c.bos_token_id, 128000u);
  EXPECT_FALSE(c.eos_token_id.has_value());
  EXPECT_EQ(Config(R"({"eos_token_id":2})").eos_token_id, 2u);
  EXPECT_FALSE(Config(R"({"eos_token_id":null})").eos_token_id.has_value());
  EXPECT_FALSE(Config(R"({"tie_word_embeddings":false})").tie_word_embeddings);
  EXPECT_TRUE(Config(R"({"tie_word_embeddings":true})").tie_word_embeddings);
  EXPECT_TRUE(Config(R"({"tie_word_embeddings":"no"})").tie_word_embeddings);
}

TEST(ModelConfigParse, NanAndInfinityTolerated) {
  ModelConfig c = Config(
      R"({"hidden_size":8,"rope_theta":Infinity,"rms_norm_eps":NaN,"x":-Infinity,)"
      R"("vocab_size":32})");
  EXPECT_EQ(c.hidden_size, 8u);
  EXPECT_EQ(c.vocab_size, 32u);
  EXPECT_TRUE(std::isinf(c.rope_theta));
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);  // NaN became null: the default
  json lenient = ParseLenientJson(R"({"a":NaN,"b":-Infinity,"c":Infinity})");
  EXPECT_TRUE(lenient.at("a").is_null());
  EXPECT_LT(lenient.at("b").get<double>(), -1e307);
  EXPECT_GT(lenient.at("c").get<double>(), 1e307);
}

TEST(ModelConfigParse, ErrorsNameTheFile) {
  for (const char* text : {"", "not json", "[1,2]", "\"str\"", "{\"a\":"}) {
    SCOPED_TRACE(text);
    try {
      ParseModelConfig(text, "/m/config.json");
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("/m/config.json"), std::string::npos) << e.what();
    }
  }
}

TEST(AprenderArchitecture, NameTable) {
  const std::pair<const char*, const char*> table[] = {
      {"qwen2", "Qwen2"},         {"qwen", "Qwen2"},           {"qwen2.5", "Qwen2"},
      {"qwen3", "Qwen3"},         {"qwen3_5", "Qwen3_5"},      {"qwen3.5", "Qwen3_5"},
      {"llama", "Llama"},         {"llama2", "Llama"},         {"llama3", "Llama"},
      {"smollm", "Llama"},        {"granite", "Llama"},        {"olmo2", "Llama"},
      {"stablelm_epoch", "Llama"}, {"nemotron", "Llama"},      {"whisper", "Whisper"},
      {"bert", "Bert"},           {"gpt2", "Gpt2"},            {"starcoder2", "Gpt2"},
      {"gpt-bigcode", "Gpt2"},    {"phi", "Phi"},              {"phi3", "Phi"},
      {"phi4", "Phi"},            {"gpt-neox", "GptNeoX"},     {"pythia", "GptNeoX"},
      {"opt", "Opt"},             {"galactica", "Opt"},        {"deepseek", "DeepSeek"},
      {"deepseek_v2", "DeepSeek"}, {"gemma", "Gemma"},         {"gemma3", "Gemma"},
      {"mistral", "Mistral"},     {"mixtral", "Mistral"},      {"falcon_h1", "FalconH1"},
      {"falcon3", "FalconH1"},    {"mamba2", "Mamba"},         {"moonshine", "Moonshine"},
      {"openelm", "OpenElm"},     {"rwkv-7", "Rwkv7"},         {"falcon", "FalconClassic"},
      {"refinedweb", "FalconClassic"},
      // Case-insensitive.
      {"LLaMA", "Llama"},         {"Phi3", "Phi"},             {"QWEN2", "Qwen2"},
      // Not in the table.
      {"qwen2_moe", "Auto"},      {"qwen3_moe", "Auto"},       {"deepseek_v3", "Auto"},
      {"gemma3_text", "Auto"},    {"phimoe", "Auto"},          {"cohere", "Auto"},
      {"", "Auto"},               {"llama ", "Auto"},          {"my_new_arch", "Auto"},
  };
  for (const auto& [model_type, name] : table) {
    EXPECT_EQ(AprenderArchitectureName(std::string(model_type)), name) << model_type;
  }
  EXPECT_EQ(AprenderArchitectureName(std::nullopt), "Auto");
}

// ---------------------------------------------------------------------------------------------
// ParseTokenizerJson.

EmbeddedTokenizer Tok(const std::string& text, const std::string& config = "{}") {
  return ParseTokenizerJson(text, ParseModelConfig(config, "config.json"), "tokenizer.json");
}

TEST(TokenizerEmbed, VocabObjectWithAddedTokensOverlayById) {
  EmbeddedTokenizer t = Tok(
      R"({"added_tokens":[{"id":1,"content":"<X>"},{"id":4,"content":"<new>"},)"
      R"({"id":1,"content":"<Y>"},{"id":"2","content":"bad"},{"content":"noid"}],)"
      R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"d":3},"merges":[]}})");
  EXPECT_EQ(t.vocabulary, (std::vector<std::string>{"a", "<Y>", "c", "d", "<new>"}));
  EXPECT_EQ(t.model_type, "BPE");
  EXPECT_TRUE(t.merges.empty());
  EXPECT_TRUE(t.scores.empty());
}

TEST(TokenizerEmbed, GapsAndPaddingToConfigVocabSize) {
  EmbeddedTokenizer t = Tok(R"({"model":{"vocab":{"a":0,"c":3,"bad":-1,"f":1.5}}})",
                            R"({"vocab_size":6})");
  EXPECT_EQ(t.vocabulary,
            (std::vector<std::string>{"a", "<unk>", "<unk>", "c", "<unk>", "<unk>"}));
  EXPECT_FALSE(t.model_type.has_value());
  // A config vocab_size below the largest id does not cut the vocabulary.
  EmbeddedTokenizer big = Tok(R"({"model":{"vocab":{"a":0,"z":9}}})", R"({"vocab_size":2})");
  EXPECT_EQ(big.vocabulary.size(), 10u);
  EXPECT_EQ(big.vocabulary[9], "z");
}

TEST(TokenizerEmbed, MergesStringsAndPairs) {
  EmbeddedTokenizer t = Tok(
      R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b",["c","d"],["e"],)"
      R"(["f","g","h"],5,null,["i",1],"\u0120 t"]}})");
  EXPECT_EQ(t.merges, (std::vector<std::string>{"a b", "c d", "\xc4\xa0 t"}));
}

TEST(TokenizerEmbed, UnigramVocabBecomesVocabularyAndScores) {
  EmbeddedTokenizer t = Tok(
      R"({"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["\u2581the",-3.5],)"
      R"(["s",-12]]}})");
  EXPECT_EQ(t.vocabulary, (std::vector<std::string>{"<unk>", "\xe2\x96\x81the", "s"}));
  EXPECT_EQ(t.scores, (std::vector<double>{0.0, -3.5, -12.0}));
  EXPECT_EQ(t.model_type, "Unigram");
  // A malformed pair anywhere means nothing is embedded.
  EXPECT_TRUE(Tok(R"({"model":{"vocab":[["a",0.0],["b"]]}})").empty());
}

TEST(TokenizerEmbed, BosEosFromConfigIntegers) {
  std::string text =
      R"({"added_tokens":[{"id":0,"content":"<s>"},{"id":1,"content":"</s>"}],)"
      R"("model":{"vocab":{"<s>":0,"</s>":1,"x":2}}})";
  EmbeddedTokenizer t = Tok(text, R"({"bos_token_id":2,"eos_token_id":0})");
  EXPECT_EQ(t.bos_token_id, 2u);
  EXPECT_EQ(t.eos_token_id, 0u);
  // Without config ids: by added_tokens name.
  EmbeddedTokenizer fallback = Tok(text);
  EXPECT_EQ(fallback.bos_token_id, 0u);
  EXPECT_EQ(fallback.eos_token_id, 1u);
}

TEST(TokenizerEmbed, EosListFallsBackToAddedTokenNames) {
  // Llama-3.x: eos_token_id is a list, so the first added token named like an end token wins.
  std::string text =
      R"({"added_tokens":[{"id":128000,"content":"<|begin_of_text|>"},)"
      R"({"id":128001,"content":"<|end_of_text|>"},{"id":128009,"content":"<|eot_id|>"}],)"
      R"("model":{"type":"BPE","vocab":{"a":0}}})";
  EmbeddedTokenizer t = Tok(text, R"({"bos_token_id":128000,"eos_token_id":[128001,128009]})");
  EXPECT_EQ(t.bos_token_id, 128000u);
  EXPECT_EQ(t.eos_token_id, 128009u);
  EXPECT_EQ(t.vocabulary.size(), 128010u);
  EXPECT_EQ(t.vocabulary[128009], "<|eot_id|>");
  EXPECT_EQ(t.vocabulary[5], "<unk>");

  // "</s>" and names containing "bos"/"eos".
  EmbeddedTokenizer s = Tok(
      R"({"added_tokens":[{"id":3,"content":"[bos]"},{"id":4,"content":"</s>"},)"
      R"({"id":5,"content":"<eos>"}],"model":{"vocab":{"a":0}}})",
      R"({"eos_token_id":[4,5]})");
  EXPECT_EQ(s.bos_token_id, 3u);
  EXPECT_EQ(s.eos_token_id, 4u);  // first in file order

  // Nothing matches: absent.
  EmbeddedTokenizer none = Tok(R"({"added_tokens":[{"id":1,"content":"<pad>"}],)"
                               R"("model":{"vocab":{"a":0}}})");
  EXPECT_FALSE(none.bos_token_id.has_value());
  EXPECT_FALSE(none.eos_token_id.has_value());
}

TEST(TokenizerEmbed, NoUsableVocabularyMeansNothingEmbedded) {
  for (const char* text :
       {R"({})", R"({"model":null})", R"({"model":{"type":"BPE"}})",
        R"({"model":{"type":"BPE","vocab":{}}})", R"({"model":{"type":"BPE","vocab":"x"}})",
        R"({"added_tokens":[],"model":{"type":"WordLevel","merges":["a b"]}})"}) {
    SCOPED_TRACE(text);
    EmbeddedTokenizer t = Tok(text);
    EXPECT_TRUE(t.empty());  // nothing is embedded (ImportMetadata checks empty())
    EXPECT_TRUE(t.vocabulary.empty());
    EXPECT_TRUE(t.merges.empty());
  }
}

TEST(TokenizerEmbed, ErrorsNameTheFile) {
  for (const char* text : {"", "[]", "{\"model\":"}) {
    try {
      ParseTokenizerJson(text, DefaultModelConfig(), "/m/tokenizer.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("/m/tokenizer.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace aprfs
