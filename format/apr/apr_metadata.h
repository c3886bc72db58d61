#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <map>

namespace aprfs {

// The typed fields of aprender's AprV2Metadata that an importer fills (apr-v2-format.md §4.2),
// plus the flattened `custom` map. Serialized exactly as the newest writer does.
struct AprMetadata {
  std::string model_type;
  std::optional<std::string> name;
  std::optional<std::string> description;
  std::optional<std::string> author;
  std::optional<std::string> license;  // always emitted, null when unset
  std::optional<std::string> version;  // the model's version, not the format's
  std::optional<std::string> source;
  std::optional<std::string> original_format;
  std::optional<std::string> created_at;
  uint64_t total_size = 0;
  uint64_t param_count = 0;
  std::optional<std::string> architecture;
  std::optional<std::string> hf_architecture;
  std::optional<std::string> hf_model_type;
  std::optional<uint64_t> hidden_size;
  std::optional<uint64_t> num_layers;
  std::optional<uint64_t> num_heads;
  std::optional<uint64_t> num_kv_heads;
  std::optional<uint64_t> vocab_size;
  std::optional<uint64_t> intermediate_size;
  std::optional<uint64_t> max_position_embeddings;
  std::optional<float> rope_theta;
  std::optional<uint32_t> rope_type;
  std::optional<float> rms_norm_eps;
  std::optional<uint64_t> head_dim;
  std::optional<uint64_t> num_experts;
  std::optional<uint64_t> num_experts_per_tok;
  std::optional<uint64_t> moe_intermediate_size;
  // The flattened `custom` map: key -> JSON text (already spelled, see json_spelling.h),
  // emitted after the typed fields in key order. Keys must not repeat a typed field's name or
  // one of realizar's alias keys (§4.4).
  std::map<std::string, std::string> custom;
};

// Compact JSON in serde_json's spelling, keys in AprV2Metadata's field order (§4.2, §4.5).
std::string SerializeAprMetadata(const AprMetadata& metadata);
// The same, appended to `out`.
void AppendAprMetadata(std::string& out, const AprMetadata& metadata);
// The same, freeing each `custom` value once it is written: `out` and the parts not yet
// written are never all held at once. `metadata`'s custom values are empty afterwards.
void AppendAprMetadata(std::string& out, AprMetadata&& metadata);
// At least the size SerializeAprMetadata will produce, to reserve the buffer once.
size_t AprMetadataSizeBound(const AprMetadata& metadata);

}  // namespace aprfs
