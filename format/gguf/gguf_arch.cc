#include "format/gguf/gguf_arch.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "format/error.h"
#include "format/model/model_config.h"

namespace aprfs {
namespace {

const nlohmann::json* First(const nlohmann::json& json, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = json.find(key);
    if (it != json.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

std::optional<uint64_t> Count(const nlohmann::json& json, std::initializer_list<const char*> keys,
                              const std::string& file) {
  const nlohmann::json* value = First(json, keys);
  if (!value) return std::nullopt;
  if (!value->is_number_integer() || value->get<int64_t>() < 0 ||
      value->get<uint64_t>() > UINT32_MAX) {
    throw FormatError(file + ": " + *keys.begin() + " is " + value->dump() +
                      ", not a count the GGUF loader reads as u32");
  }
  return value->get<uint64_t>();
}

std::optional<float> Number(const nlohmann::json& json, std::initializer_list<const char*> keys) {
  const nlohmann::json* value = First(json, keys);
  if (!value || !value->is_number()) return std::nullopt;
  return static_cast<float>(value->get<double>());
}

// A count the converter reads unconditionally (its hparams[...] lookups): missing is an error.
uint32_t NeededCount(const nlohmann::json& json, std::initializer_list<const char*> keys) {
  std::optional<uint64_t> n = Count(json, keys, "config.json");
  if (!n) throw FormatError(std::string("config.json: ") + *keys.begin() + " is missing: the converter needs it");
  return static_cast<uint32_t>(*n);
}

// transformers' defaults for what the converter reads, per config class (§2.4–2.6).
void ApplyDefaults(GgufArch arch, nlohmann::json& json) {
  auto fill = [&](const char* key, nlohmann::json value) {
    if (!json.contains(key) || json[key].is_null()) json[key] = std::move(value);
  };
  switch (arch) {
    case GgufArch::kLlama:
      fill("max_position_embeddings", 2048);
      fill("rms_norm_eps", 1e-6);
      fill("rope_theta", 10000.0);
      if (json.contains("num_attention_heads")) fill("num_key_value_heads", json["num_attention_heads"]);
      break;
    case GgufArch::kQwen2:
    case GgufArch::kQwen3:
      fill("max_position_embeddings", 32768);
      fill("rms_norm_eps", 1e-6);
      fill("rope_theta", 10000.0);
      fill("num_key_value_heads", 32);
      if (arch == GgufArch::kQwen3) fill("head_dim", 128);  // Qwen2Config has none
      break;
    case GgufArch::kGemma2:  // Gemma2Config
      fill("max_position_embeddings", 8192);
      fill("rms_norm_eps", 1e-6);
      fill("head_dim", 256);
      fill("attn_logit_softcapping", 50.0);
      fill("final_logit_softcapping", 30.0);
      fill("sliding_window", 4096);
      fill("rope_theta", 10000.0);
      if (json.contains("num_attention_heads")) fill("num_key_value_heads", json["num_attention_heads"]);
      break;
    case GgufArch::kGemma3:  // Gemma3TextConfig
      fill("max_position_embeddings", 131072);
      fill("num_attention_heads", 8);
      fill("num_key_value_heads", 4);
      fill("head_dim", 256);
      fill("rms_norm_eps", 1e-6);
      fill("rope_theta", 1000000.0);
      fill("rope_local_base_freq", 10000.0);
      fill("sliding_window", 4096);
      break;
    case GgufArch::kPhi3:
      fill("max_position_embeddings", 4096);
      fill("original_max_position_embeddings", 4096);
      fill("rms_norm_eps", 1e-5);
      fill("rope_theta", 10000.0);
      if (json.contains("num_attention_heads")) fill("num_key_value_heads", json["num_attention_heads"]);
      break;
  }
}

// Gemma 2's keys (§2.8): its converter writes its own list.
void AddGemma2Keys(const GgufConfig& config, uint32_t file_type, GgufMetadata& kv) {
  const nlohmann::json& json = config.json;
  const std::string file = "config.json";
  auto number = [&](const char* key) {
    std::optional<float> v = Number(json, {key});
    if (!v) throw FormatError(file + ": " + key + " is missing: the converter needs it");
    return *v;
  };
  kv.U32("gemma2.context_length", NeededCount(json, {"max_position_embeddings"}));
  kv.U32("gemma2.embedding_length", config.embedding_length);
  kv.U32("gemma2.block_count", config.block_count);
  kv.U32("gemma2.feed_forward_length", NeededCount(json, {"intermediate_size"}));
  kv.U32("gemma2.attention.head_count", config.head_count);
  kv.U32("gemma2.attention.head_count_kv", config.head_count_kv);
  kv.F32("gemma2.attention.layer_norm_rms_epsilon", number("rms_norm_eps"));
  kv.U32("gemma2.attention.key_length", config.head_dim);
  kv.U32("gemma2.attention.value_length", config.head_dim);
  kv.U32("general.file_type", file_type);
  kv.F32("gemma2.attn_logit_softcapping", number("attn_logit_softcapping"));
  kv.F32("gemma2.final_logit_softcapping", number("final_logit_softcapping"));
  kv.U32("gemma2.attention.sliding_window", NeededCount(json, {"sliding_window"}));
}

// Gemma 3's keys after the generic ones (§2.8): some set again (they keep their place), the
// softcapping and the sliding window appended.
void AddGemma3Keys(const GgufConfig& config, GgufMetadata& kv) {
  const nlohmann::json& json = config.json;
  const std::string file = "config.json";
  if (json.contains("attn_logit_softcapping") && !json["attn_logit_softcapping"].is_null()) {
    throw FormatError(file + ": attn_logit_softcapping is set: the converter refuses it for Gemma 3");
  }
  auto count = [&](const char* key) { return static_cast<uint32_t>(Count(json, {key}, file).value_or(0)); };
  kv.U32("gemma3.context_length", count("max_position_embeddings"));
  kv.U32("gemma3.attention.head_count", config.head_count);
  kv.F32("gemma3.attention.layer_norm_rms_epsilon", Number(json, {"rms_norm_eps"}).value_or(1e-6f));
  kv.U32("gemma3.attention.key_length", config.head_dim);
  kv.U32("gemma3.attention.value_length", config.head_dim);
  const nlohmann::json rope = RopeParameters(json);
  const nlohmann::json& full = rope.contains("full_attention") ? rope["full_attention"] : rope;
  kv.F32("gemma3.rope.freq_base", Number(full, {"rope_theta"}).value_or(1000000.0f));
  if (auto cap = Number(json, {"final_logit_softcapping"}); cap && *cap != 0.0f) {
    kv.F32("gemma3.final_logit_softcapping", *cap);
  }
  const nlohmann::json* pattern = First(json, {"sliding_window_pattern"});
  if (!(pattern && pattern->is_number() && pattern->get<double>() == 1)) {
    kv.U32("gemma3.attention.sliding_window", count("sliding_window"));
  }
  kv.U32("gemma3.attention.head_count_kv", config.head_count_kv);
}

// Phi-3 with long-context factors: the attention factor of its scaled RoPE (§2.7), which the
// converter adds while it generates the factor tensors, before the other keys.
void AddPhi3AttnFactor(const GgufConfig& config, GgufMetadata& kv) {
  const nlohmann::json rope = RopeParameters(config.json);
  const nlohmann::json* factors = First(rope, {"long_factor"});
  if (!factors || (factors->is_array() && factors->empty())) return;
  const double positions = First(config.json, {"n_positions", "max_position_embeddings"})->get<double>();
  const nlohmann::json* original = First(rope, {"original_max_position_embeddings"});
  if (!original || !original->is_number() || original->get<double>() <= 0) {
    throw FormatError("config.json: original_max_position_embeddings is missing: the converter needs it");
  }
  const double scale = positions / original->get<double>();
  double factor = 1.0;
  if (config.rope_type == "su" || config.rope_type == "longrope") {
    if (scale > 1.0) factor = std::sqrt(1 + std::log(scale) / std::log(original->get<double>()));
  } else if (config.rope_type == "yarn") {
    if (scale > 1.0) factor = 0.1 * std::log(scale) + 1.0;
  } else {
    throw FormatError("config.json: rope_scaling type " + Quote(config.rope_type) +
                      " with long_factor: the converter supports longrope, su and yarn");
  }
  kv.F32("phi3.rope.scaling.attn_factor", static_cast<float>(factor));
}

// Phi-3's keys (§2.7): its converter writes its own list, not the generic one.
void AddPhi3Keys(const GgufConfig& config, uint32_t file_type, GgufMetadata& kv) {
  const nlohmann::json& json = config.json;
  const nlohmann::json rope = RopeParameters(json);
  const std::string file = "config.json";
  kv.U32("phi3.context_length", NeededCount(json, {"n_positions", "max_position_embeddings"}));
  kv.U32("phi3.rope.scaling.original_context_length",
         NeededCount(rope, {"original_max_position_embeddings"}));
  kv.U32("phi3.embedding_length", config.embedding_length);
  kv.U32("phi3.feed_forward_length", NeededCount(json, {"intermediate_size"}));
  kv.U32("phi3.block_count", config.block_count);
  kv.U32("phi3.attention.head_count", config.head_count);
  kv.U32("phi3.attention.head_count_kv", config.head_count_kv);
  kv.F32("phi3.attention.layer_norm_rms_epsilon", Number(json, {"rms_norm_eps"}).value_or(1e-5f));
  kv.U32("phi3.rope.dimension_count", config.rope_dims);
  kv.F32("phi3.rope.freq_base", Number(rope, {"rope_theta"}).value_or(10000.0f));
  kv.U32("general.file_type", file_type);
  // A null sliding_window (Phi-4) is written as 0.
  kv.U32("phi3.attention.sliding_window", static_cast<uint32_t>(Count(json, {"sliding_window"}, file).value_or(0)));
}

}  // namespace

GgufConfig ParseGgufConfig(const std::string& text, const std::string& file) {
  GgufConfig config;
  nlohmann::json json = ParseLenientJson(text);
  if (!json.is_object()) throw FormatError(file + ": not a JSON object");
  if (json.contains("text_config") && json["text_config"].is_object()) {
    for (const auto& [key, value] : json["text_config"].items()) json[key] = value;
  }
  std::string hf_arch;
  if (json.contains("architectures") && json["architectures"].is_array() &&
      !json["architectures"].empty() && json["architectures"][0].is_string()) {
    hf_arch = json["architectures"][0].get<std::string>();
  }
  if (hf_arch == "LlamaForCausalLM" || hf_arch == "LLaMAForCausalLM" ||
      hf_arch == "MistralForCausalLM") {
    config.arch = GgufArch::kLlama;
    config.arch_name = "llama";
  } else if (hf_arch == "Qwen2ForCausalLM" || hf_arch == "Qwen2Model") {
    config.arch = GgufArch::kQwen2;
    config.arch_name = "qwen2";
  } else if (hf_arch == "Qwen3ForCausalLM" || hf_arch == "Qwen3Model") {
    config.arch = GgufArch::kQwen3;
    config.arch_name = "qwen3";
  } else if (hf_arch == "Phi3ForCausalLM") {
    config.arch = GgufArch::kPhi3;
    config.arch_name = "phi3";
  } else if (hf_arch == "Gemma2ForCausalLM") {
    config.arch = GgufArch::kGemma2;
    config.arch_name = "gemma2";
  } else if (hf_arch == "Gemma3ForCausalLM" || hf_arch == "Gemma3ForConditionalGeneration") {
    config.arch = GgufArch::kGemma3;
    config.arch_name = "gemma3";
  } else {
    throw FormatError(file + ": architecture " + (hf_arch.empty() ? "(none)" : Quote(hf_arch)) +
                      " has no GGUF mapping in aprfs (mapped: LlamaForCausalLM, "
                      "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, "
                      "Gemma2ForCausalLM, Gemma3ForCausalLM)");
  }
  ApplyDefaults(config.arch, json);
  auto required = [&](std::initializer_list<const char*> keys) -> uint32_t {
    std::optional<uint64_t> value = Count(json, keys, file);
    if (!value || *value == 0) {
      throw FormatError(file + ": " + *keys.begin() + " is missing: llama.cpp needs it");
    }
    return static_cast<uint32_t>(*value);
  };
  config.block_count = required({"n_layers", "num_hidden_layers", "n_layer", "num_layers"});
  config.embedding_length = required({"hidden_size", "n_embd", "dim"});
  config.head_count = required({"num_attention_heads", "n_head", "n_heads"});
  config.head_count_kv = required({"num_key_value_heads", "n_kv_heads"});
  std::optional<uint64_t> head_dim = Count(json, {"head_dim"}, file);
  config.head_dim = head_dim && *head_dim > 0 ? static_cast<uint32_t>(*head_dim)
                                              : config.embedding_length / config.head_count;
  if (std::optional<uint64_t> vocab = Count(json, {"vocab_size"}, file)) {
    config.vocab_size = static_cast<uint32_t>(*vocab);
  }
  const nlohmann::json rope = RopeParameters(json);
  const nlohmann::json* type = First(rope, {"rope_type", "type"});
  if (type && type->is_string()) {
    for (char c : type->get<std::string>()) config.rope_type += static_cast<char>(std::tolower(c));
  }
  config.rope_dims = config.head_dim;
  if (config.arch == GgufArch::kPhi3) {  // int(factor * hidden) // heads, as the converter
    const double factor = Number(rope, {"partial_rotary_factor"}).value_or(1.0f);
    config.rope_dims = static_cast<uint32_t>(
        static_cast<uint64_t>(factor * config.embedding_length) / config.head_count);
  }
  config.json = std::move(json);
  return config;
}

nlohmann::json RopeParameters(const nlohmann::json& config) {
  const nlohmann::json* given = First(config, {"rope_parameters", "rope_scaling"});
  nlohmann::json rope = given && given->is_object() ? *given : nlohmann::json::object();
  if (rope.contains("full_attention") || rope.contains("sliding_attention")) return rope;
  auto mirror = [&](const char* key, const nlohmann::json* value) {
    if (!rope.contains(key) && value) rope[key] = *value;
  };
  mirror("rope_theta", First(config, {"global_rope_theta", "rope_global_theta", "rope_theta_global",
                                      "rope_theta", "rotary_emb_base"}));
  if (!rope.contains("rope_type") && rope.contains("type")) rope["rope_type"] = rope["type"];
  mirror("partial_rotary_factor", First(config, {"partial_rotary_factor", "rope_pct", "rope_percent"}));
  mirror("original_max_position_embeddings", First(config, {"original_max_position_embeddings"}));
  if (const nlohmann::json* local = First(config, {"local_rope_theta", "rope_local_theta", "rope_theta_local",
                                                   "swa_rope_theta", "rope_local_base_freq"})) {
    rope["sliding_attention"] = {{"rope_theta", *local}};
  }
  return rope;
}

// general.name as llama.cpp can load it: a name containing "phi3" or "phi-3" (in any case)
// switches on Phi-3's SentencePiece token handling, which aborts on the GPT-2 style
// vocabularies the views write (gguf-view.md §10); such a name is written with "phi_3".
std::string LoadableGeneralName(const std::string& name) {
  std::string out = name;
  for (const std::string needle : {"phi-3", "phi3"}) {
    for (size_t at = 0; at + needle.size() <= out.size();) {
      bool match = true;
      for (size_t i = 0; i < needle.size() && match; ++i) {
        match = std::tolower(static_cast<unsigned char>(out[at + i])) == needle[i];
      }
      if (!match) {
        ++at;
        continue;
      }
      out.replace(at + 3, needle.size() - 3, "_3");
      at += 5;
    }
  }
  return out;
}


std::string SizeLabel(uint64_t total_params) {
  const double total = static_cast<double>(total_params);
  char suffix = 'K';
  double scaled = total * 1e-3;
  if (total > 1e12) {
    suffix = 'T', scaled = total * 1e-12;
  } else if (total > 1e9) {
    suffix = 'B', scaled = total * 1e-9;
  } else if (total > 1e6) {
    suffix = 'M', scaled = total * 1e-6;
  }
  const std::string whole = std::to_string(static_cast<uint64_t>(std::llround(scaled)));
  const int decimals = std::max(2 - static_cast<int>(whole == "0" ? 0 : whole.size()), 0);
  char text[64];
  std::snprintf(text, sizeof text, "%.*f%c", decimals, scaled, suffix);
  return text;
}

void AddArchitectureKeys(const GgufConfig& config, const std::string& model_name,
                         uint32_t file_type, uint64_t total_params, GgufMetadata& kv) {
  const std::string& a = config.arch_name;
  const nlohmann::json& json = config.json;
  kv.String("general.architecture", a);
  if (config.arch == GgufArch::kPhi3) AddPhi3AttnFactor(config, kv);  // before general.type
  kv.String("general.type", "model");
  kv.String("general.name", model_name);
  kv.String("general.size_label", SizeLabel(total_params));
  if (config.arch == GgufArch::kPhi3 || config.arch == GgufArch::kGemma2) {
    if (config.arch == GgufArch::kPhi3) AddPhi3Keys(config, file_type, kv);
    if (config.arch == GgufArch::kGemma2) AddGemma2Keys(config, file_type, kv);
    kv.U32("general.quantization_version", 2);
    return;
  }

  kv.U32(a + ".block_count", config.block_count);
  const std::string file = "config.json";
  if (auto n = Count(json, {"max_position_embeddings", "n_ctx", "n_positions", "max_length",
                            "max_sequence_length", "model_max_length"}, file)) {
    kv.U32(a + ".context_length", static_cast<uint32_t>(*n));
  }
  kv.U32(a + ".embedding_length", config.embedding_length);
  if (auto n = Count(json, {"intermediate_size", "n_inner", "hidden_dim"}, file)) {
    kv.U32(a + ".feed_forward_length", static_cast<uint32_t>(*n));
  }
  kv.U32(a + ".attention.head_count", config.head_count);
  kv.U32(a + ".attention.head_count_kv", config.head_count_kv);
  if (json.contains("is_causal") && json["is_causal"] == false) kv.Bool(a + ".attention.causal", false);

  // RoPE scaling (§2.3.1); llama3's becomes the rope_freqs tensor instead.
  const nlohmann::json* rope = First(json, {"rope_parameters", "rope_scaling"});
  if (rope && rope->is_object()) {
    const std::optional<float> factor = Number(*rope, {"factor"});
    if (config.rope_type == "linear" && factor) {
      kv.String(a + ".rope.scaling.type", "linear");
      kv.F32(a + ".rope.scaling.factor", *factor);
    } else if (config.rope_type == "yarn" && factor) {
      kv.String(a + ".rope.scaling.type", "yarn");
      kv.F32(a + ".rope.scaling.factor", *factor);
      std::optional<uint64_t> original = Count(*rope, {"original_max_position_embeddings"}, file);
      if (!original) {
        throw FormatError(file + ": yarn rope scaling without original_max_position_embeddings");
      }
      kv.U32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(*original));
      if (auto v = Number(*rope, {"extrapolation_factor"})) kv.F32(a + ".rope.scaling.yarn_ext_factor", *v);
      if (auto v = Number(*rope, {"attention_factor", "attn_factor"})) kv.F32(a + ".rope.scaling.yarn_attn_factor", *v);
      if (auto v = Number(*rope, {"beta_fast"})) kv.F32(a + ".rope.scaling.yarn_beta_fast", *v);
      if (auto v = Number(*rope, {"beta_slow"})) kv.F32(a + ".rope.scaling.yarn_beta_slow", *v);
    } else if (config.rope_type == "su" || config.rope_type == "longrope") {
      kv.String(a + ".rope.scaling.type", "longrope");
    }
  }
  const std::optional<float> theta =
      rope && rope->is_object() && Number(*rope, {"rope_theta"})
          ? Number(*rope, {"rope_theta"})
          : Number(json, {"global_rope_theta", "rope_global_theta", "rope_theta_global",
                          "rope_theta", "rotary_emb_base"});
  if (theta) kv.F32(a + ".rope.freq_base", *theta);
  const nlohmann::json rope_params = RopeParameters(json);
  if (rope_params.contains("sliding_attention") && rope_params["sliding_attention"].is_object()) {
    if (auto swa = Number(rope_params["sliding_attention"], {"rope_theta"})) {
      kv.F32(a + ".rope.freq_base_swa", *swa);
    }
  }
  if (auto eps = Number(json, {"rms_norm_eps", "norm_eps"})) {
    kv.F32(a + ".attention.layer_norm_rms_epsilon", *eps);
  }
  if (auto eps = Number(json, {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"})) {
    kv.F32(a + ".attention.layer_norm_epsilon", *eps);
  }
  // Qwen2's config class has no head_dim: written only when config.json gives it. LLaMA's and
  // Qwen3's always have one (transformers fills it in).
  if (config.arch != GgufArch::kQwen2 || json.contains("head_dim")) {
    kv.U32(a + ".attention.key_length", config.head_dim);
    kv.U32(a + ".attention.value_length", config.head_dim);
  }
  kv.U32("general.file_type", file_type);
  if (config.arch == GgufArch::kGemma3) AddGemma3Keys(config, kv);
  if (config.arch == GgufArch::kLlama) {
    if (!config.vocab_size) throw FormatError(file + ": vocab_size is missing: llama.cpp needs it");
    kv.U32("llama.vocab_size", *config.vocab_size);
    kv.U32("llama.rope.dimension_count", config.head_dim);
  }
  kv.U32("general.quantization_version", 2);
}

}  // namespace aprfs
