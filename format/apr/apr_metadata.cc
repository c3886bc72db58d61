#include "format/apr/apr_metadata.h"

#include <type_traits>

#include "format/apr/json_spelling.h"

namespace aprfs {
namespace {

class ObjectWriter {
 public:
  explicit ObjectWriter(std::string& out) : out_(out) { out_ += '{'; }
  ~ObjectWriter() { out_ += '}'; }

  void String(const char* key, const std::string& value) {
    Key(key);
    AppendJsonString(out_, value);
  }
  void OptString(const char* key, const std::optional<std::string>& value) {
    if (value) String(key, *value);
  }
  void NullableString(const char* key, const std::optional<std::string>& value) {
    if (value) {
      String(key, *value);
    } else {
      Key(key);
      out_ += "null";
    }
  }
  void Unsigned(const char* key, uint64_t value) {
    Key(key);
    out_ += std::to_string(value);
  }
  template <typename Int>
  void OptUnsigned(const char* key, const std::optional<Int>& value) {
    if (value) Unsigned(key, *value);
  }
  void OptF32(const char* key, const std::optional<float>& value) {
    if (!value) return;
    Key(key);
    AppendJsonF32(out_, *value);
  }
  void Raw(const std::string& key, const std::string& json_text) {
    Key(key);
    out_ += json_text;
  }

 private:
  void Key(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    AppendJsonString(out_, key);
    out_ += ':';
  }

  std::string& out_;
  bool first_ = true;
};

}  // namespace

size_t AprMetadataSizeBound(const AprMetadata& m) {
  // Escaping spells a byte in at most 6; the numbers and key names fit in the constant.
  size_t bound = 2048 + 6 * m.model_type.size();
  for (const auto& [key, text] : m.custom) bound += 6 * key.size() + 4 + text.size();
  for (const auto* field : {&m.name, &m.description, &m.author, &m.license, &m.version, &m.source,
                            &m.original_format, &m.created_at, &m.architecture,
                            &m.hf_architecture, &m.hf_model_type}) {
    if (*field) bound += 6 * (*field)->size();
  }
  return bound;
}

std::string SerializeAprMetadata(const AprMetadata& m) {
  std::string out;
  // The custom values can be megabytes: growing by doubling would hold up to twice that.
  out.reserve(AprMetadataSizeBound(m));
  AppendAprMetadata(out, m);
  return out;
}

namespace {

// AppendAprMetadata, keeping the custom values of a const `m` or freeing those of a mutable one.
template <typename Metadata>
void Append(std::string& out, Metadata& m) {
  {
    ObjectWriter w(out);
    // Field order of AprV2Metadata (newest writer); unset optional fields are omitted except
    // license, data_source and data_license, which are always written (null when unset).
    w.String("model_type", m.model_type);
    w.OptString("name", m.name);
    w.OptString("description", m.description);
    w.OptString("author", m.author);
    w.NullableString("license", m.license);
    w.NullableString("data_source", std::nullopt);
    w.NullableString("data_license", std::nullopt);
    w.OptString("version", m.version);
    w.OptString("source", m.source);
    w.OptString("original_format", m.original_format);
    w.OptString("created_at", m.created_at);
    w.Unsigned("total_size", m.total_size);
    w.Unsigned("param_count", m.param_count);
    w.OptString("architecture", m.architecture);
    w.OptString("hf_architecture", m.hf_architecture);
    w.OptString("hf_model_type", m.hf_model_type);
    w.OptUnsigned("hidden_size", m.hidden_size);
    w.OptUnsigned("num_layers", m.num_layers);
    w.OptUnsigned("num_heads", m.num_heads);
    w.OptUnsigned("num_kv_heads", m.num_kv_heads);
    w.OptUnsigned("vocab_size", m.vocab_size);
    w.OptUnsigned("intermediate_size", m.intermediate_size);
    w.OptUnsigned("max_position_embeddings", m.max_position_embeddings);
    w.OptF32("rope_theta", m.rope_theta);
    w.OptUnsigned("rope_type", m.rope_type);
    w.OptF32("rms_norm_eps", m.rms_norm_eps);
    w.OptUnsigned("head_dim", m.head_dim);
    w.OptUnsigned("num_experts", m.num_experts);
    w.OptUnsigned("num_experts_per_tok", m.num_experts_per_tok);
    w.OptUnsigned("moe_intermediate_size", m.moe_intermediate_size);
    for (auto& [key, text] : m.custom) {
      w.Raw(key, text);
      if constexpr (!std::is_const_v<Metadata>) std::string().swap(text);
    }
  }
}

}  // namespace

void AppendAprMetadata(std::string& out, const AprMetadata& m) { Append(out, m); }

void AppendAprMetadata(std::string& out, AprMetadata&& m) { Append(out, m); }

}  // namespace aprfs
