#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace aprfs {

// What aprender's importer takes from config.json (notes: aprender-import.md §2): the identity
// strings and the typed dims, with its alias keys and defaults.
struct ModelConfig {
  std::optional<std::string> model_type;       // config `model_type`, verbatim
  std::optional<std::string> hf_architecture;  // `architectures[0]`
  std::optional<uint64_t> hidden_size;
  std::optional<uint64_t> num_layers;
  std::optional<uint64_t> num_heads;
  std::optional<uint64_t> num_kv_heads;
  std::optional<uint64_t> vocab_size;
  std::optional<uint64_t> intermediate_size;
  std::optional<uint64_t> max_position_embeddings;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-6f;
  uint32_t rope_type = 0;
  std::optional<uint64_t> head_dim;
  std::optional<uint64_t> num_experts;
  std::optional<uint64_t> num_experts_per_tok;
  std::optional<uint64_t> moe_intermediate_size;
  std::optional<uint64_t> bos_token_id;  // only when a single integer
  std::optional<uint64_t> eos_token_id;
  bool tie_word_embeddings = true;       // transformers' PretrainedConfig default
  // `quantization_config.weight_block_size` of fine-grained FP8 checkpoints (rows, cols), when
  // given as two positive integers (apr-quantization.md §9.2).
  std::optional<std::pair<uint64_t, uint64_t>> fp8_block;
};

// The config of a model with no config.json: every dim absent, aprender's defaults elsewhere.
ModelConfig DefaultModelConfig();

// Parses config.json. Throws FormatError naming `file` when the text is not a JSON object
// (after aprender's NaN/Infinity tolerance).
ModelConfig ParseModelConfig(std::string_view text, std::string_view file);

// Debug name of aprender's `Architecture` enum for a config `model_type` ("Phi", "Llama",
// "Qwen2"... or "Auto").
std::string AprenderArchitectureName(const std::optional<std::string>& model_type);

// Parses JSON that may use the NaN/Infinity spellings Python's json module writes.
nlohmann::json ParseLenientJson(std::string_view text);

}  // namespace aprfs
