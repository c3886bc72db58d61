#include "format/model/model_config.h"

#include <algorithm>
#include <initializer_list>
#include <unordered_map>

#include "format/error.h"

namespace aprfs {
namespace {

using nlohmann::json;

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// aprender takes the first alias key that is present, whatever its value; a value of the wrong
// type then counts as absent (it does not fall through to the next alias).
const json* FirstPresent(const json& config, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = config.find(key);
    if (it != config.end()) return &*it;
  }
  return nullptr;
}

std::optional<uint64_t> UnsignedOf(const json* value) {
  if (value && value->is_number_unsigned()) return value->get<uint64_t>();
  return std::nullopt;
}

std::optional<double> NumberOf(const json* value) {
  if (value && value->is_number()) return value->get<double>();
  return std::nullopt;
}

std::optional<std::string> StringOf(const json& config, const char* key) {
  auto it = config.find(key);
  if (it != config.end() && it->is_string()) return it->get<std::string>();
  return std::nullopt;
}

uint32_t RopeTypeFor(const std::optional<std::string>& model_type) {
  static const char* const kNeox[] = {"qwen2",   "qwen2.5", "qwen",    "qwen3",   "qwen3_5",
                                      "qwen3.5", "phi",     "phi3",    "phi4",    "gpt-neox",
                                      "gpt_neox", "gptneox", "pythia"};
  if (!model_type) return 0;
  for (const char* name : kNeox) {
    if (*model_type == name) return 2;
  }
  return 0;
}

}  // namespace

json ParseLenientJson(std::string_view text) {
  try {
    return json::parse(text);
  } catch (const json::exception&) {
    // Python's json module writes NaN and Infinity, which JSON lacks; aprender rewrites them.
    std::string patched(text);
    ReplaceAll(patched, "-Infinity", "-1e308");
    ReplaceAll(patched, "Infinity", "1e308");
    ReplaceAll(patched, "NaN", "null");
    return json::parse(patched);
  }
}

ModelConfig DefaultModelConfig() { return ModelConfig{}; }

ModelConfig ParseModelConfig(std::string_view text, std::string_view file) {
  json config;
  try {
    config = ParseLenientJson(text);
  } catch (const json::exception& e) {
    throw FormatError(std::string(file) + ": not valid JSON: " + e.what());
  }
  if (!config.is_object()) throw FormatError(std::string(file) + ": must be a JSON object");

  ModelConfig c;
  c.model_type = StringOf(config, "model_type");
  auto archs = config.find("architectures");
  if (archs != config.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string()) {
    c.hf_architecture = (*archs)[0].get<std::string>();
  }
  c.hidden_size = UnsignedOf(FirstPresent(config, {"hidden_size", "n_embd", "n_embed", "d_model"}));
  c.num_layers = UnsignedOf(FirstPresent(config, {"num_hidden_layers", "n_layer", "num_layers"}));
  c.num_heads = UnsignedOf(FirstPresent(config, {"num_attention_heads", "n_head", "num_heads"}));
  c.num_kv_heads = UnsignedOf(FirstPresent(config, {"num_key_value_heads"}));
  if (!c.num_kv_heads) c.num_kv_heads = c.num_heads;
  c.vocab_size = UnsignedOf(FirstPresent(config, {"vocab_size"}));
  c.intermediate_size =
      UnsignedOf(FirstPresent(config, {"intermediate_size", "n_inner", "ffn_dim"}));
  if (!c.intermediate_size && c.hidden_size) c.intermediate_size = 4 * *c.hidden_size;
  c.max_position_embeddings =
      UnsignedOf(FirstPresent(config, {"max_position_embeddings", "n_positions", "n_ctx"}));
  if (auto theta = NumberOf(FirstPresent(config, {"rope_theta"}))) {
    c.rope_theta = static_cast<float>(*theta);
  }
  if (auto eps = NumberOf(
          FirstPresent(config, {"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"}))) {
    c.rms_norm_eps = static_cast<float>(*eps);
  }
  c.rope_type = RopeTypeFor(c.model_type);
  c.head_dim = UnsignedOf(FirstPresent(config, {"head_dim"}));
  c.num_experts =
      UnsignedOf(FirstPresent(config, {"num_local_experts", "num_experts", "n_routed_experts"}));
  c.num_experts_per_tok =
      UnsignedOf(FirstPresent(config, {"num_experts_per_tok", "num_experts_per_token"}));
  c.moe_intermediate_size = UnsignedOf(FirstPresent(config, {"moe_intermediate_size"}));
  c.bos_token_id = UnsignedOf(FirstPresent(config, {"bos_token_id"}));
  c.eos_token_id = UnsignedOf(FirstPresent(config, {"eos_token_id"}));
  auto tie = config.find("tie_word_embeddings");
  if (tie != config.end() && tie->is_boolean()) c.tie_word_embeddings = tie->get<bool>();
  auto quantization = config.find("quantization_config");
  if (quantization != config.end() && quantization->is_object()) {
    auto block = quantization->find("weight_block_size");
    if (block != quantization->end() && block->is_array() && block->size() == 2 &&
        (*block)[0].is_number_unsigned() && (*block)[1].is_number_unsigned() &&
        (*block)[0].get<uint64_t>() > 0 && (*block)[1].get<uint64_t>() > 0) {
      c.fp8_block = {(*block)[0].get<uint64_t>(), (*block)[1].get<uint64_t>()};
    }
  }
  return c;
}

std::string AprenderArchitectureName(const std::optional<std::string>& model_type) {
  static const std::unordered_map<std::string, const char*> kByModelType = [] {
    std::unordered_map<std::string, const char*> map;
    auto add = [&](const char* variant, std::initializer_list<const char*> names) {
      for (const char* name : names) map[name] = variant;
    };
    add("Qwen2", {"qwen2", "qwen", "qwen2.5"});
    add("Qwen3", {"qwen3"});
    add("Qwen3_5", {"qwen3_5", "qwen3.5"});
    add("Llama", {"llama", "llama2", "llama3", "smollm", "smollm2", "granite", "granite3",
                  "nemotron", "olmo", "olmo2", "stablelm", "stablelm_epoch", "stablelm_alpha"});
    add("Whisper", {"whisper"});
    add("Bert", {"bert"});
    add("Gpt2", {"gpt2", "starcoder", "starcoder2", "bigcode", "gpt_bigcode", "gpt-bigcode"});
    add("Phi", {"phi", "phi3", "phi4"});
    add("GptNeoX", {"gpt-neox", "gpt_neox", "gptneox", "pythia"});
    add("Opt", {"opt", "galactica"});
    add("DeepSeek", {"deepseek", "deepseek_v2", "deepseek-v2"});
    add("Gemma", {"gemma", "gemma2", "gemma3"});
    add("Mistral", {"mistral", "mixtral"});
    add("FalconH1", {"falcon_h1", "falcon-h1", "falconh1", "falcon3"});
    add("Mamba", {"mamba", "mamba2"});
    add("Moonshine", {"moonshine"});
    add("OpenElm", {"openelm"});
    add("Rwkv7", {"rwkv", "rwkv7", "rwkv-7"});
    add("FalconClassic", {"falcon", "falcon7b", "falcon40b", "falcon11b", "refinedweb"});
    return map;
  }();
  if (!model_type) return "Auto";
  std::string lower = *model_type;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto it = kByModelType.find(lower);
  return it == kByModelType.end() ? "Auto" : it->second;
}

}  // namespace aprfs
