#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "format/gguf/gguf_container.h"

namespace aprfs {

// The llama.cpp architectures a GGUF view maps (gguf-view.md §2).
enum class GgufArch { kLlama, kQwen2, kQwen3, kPhi3, kGemma2, kGemma3 };

// config.json as the converter sees it: text_config merged into the root (its keys win), and
// the transformers config class's defaults for the keys the converter reads (§2.2).
struct GgufConfig {
  GgufArch arch = GgufArch::kLlama;
  std::string arch_name;  // "llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"
  nlohmann::json json;    // merged config.json
  uint32_t block_count = 0;
  uint32_t embedding_length = 0;
  uint32_t head_count = 0;
  uint32_t head_count_kv = 0;
  uint32_t head_dim = 0;
  std::optional<uint32_t> vocab_size;
  std::string rope_type;  // lower case, "" when none
  uint32_t rope_dims = 0;  // rotated dimensions per head (Phi-3: partial_rotary_factor)
};

// The converter's rope parameters (§2.2): rope_parameters or rope_scaling, with rope_theta,
// partial_rotary_factor and original_max_position_embeddings mirrored from the top level when
// the dict lacks them, and a local (sliding-window) theta as sliding_attention.rope_theta.
nlohmann::json RopeParameters(const nlohmann::json& config);

// Reads config.json (`text`, named `file` in errors). Throws FormatError when the model's
// `architectures[0]` is not one the GGUF view maps (the message lists those that are), or a
// key the loader needs is missing or not a positive integer.
GgufConfig ParseGgufConfig(const std::string& text, const std::string& file);

// Gemma's norms hold w where the model computes x * (1 + w): the converter stores 1 + w.
constexpr bool NormsStoreOnePlus(GgufArch arch) {
  return arch == GgufArch::kGemma2 || arch == GgufArch::kGemma3;
}

// The `general.*` and architecture keys in the converter's order (§2.1, §2.3–2.8), up to and
// including general.file_type and general.quantization_version; `file_type` is the
// LlamaFileType of the output, `total_params` the element count of every GGUF tensor.
void AddArchitectureKeys(const GgufConfig& config, const std::string& model_name,
                         uint32_t file_type, uint64_t total_params, GgufMetadata& kv);

// general.name as llama.cpp can load it: a name containing "phi3" or "phi-3" (in any case)
// switches on Phi-3's SentencePiece token handling, which aborts on the GPT-2 style
// vocabularies the views write (gguf-view.md §10); such a name is written with "phi_3".
std::string LoadableGeneralName(const std::string& model_name);

// "8.0B", "494M": general.size_label from a parameter count (§2.1).
std::string SizeLabel(uint64_t total_params);

}  // namespace aprfs
