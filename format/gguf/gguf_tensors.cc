#include "format/gguf/gguf_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "format/error.h"

namespace aprfs {
namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Names the converter skips before mapping (vision towers and the like), per architecture.
bool Skipped(GgufArch arch, const std::string& name) {
  if (EndsWith(name, ".attention.masked_bias") || EndsWith(name, ".attention.bias") ||
      EndsWith(name, ".rotary_emb.inv_freq")) {
    return true;
  }
  if (arch == GgufArch::kLlama) {
    for (const char* part : {"vision_tower", "vision_model", "audio_tower", "model.connector",
                             "multi_modal_projector"}) {
      if (Contains(name, part)) return true;
    }
    for (const char* prefix : {"vision_encoder.", "vision_language_adapter.", "patch_merger.",
                               "pre_mm_projector_norm", "audio_encoder."}) {
      if (StartsWith(name, prefix)) return true;
    }
    return false;
  }
  if (arch == GgufArch::kPhi3) {
    for (const char* prefix : {"model.vision_tower.", "vision_tower.", "model.mm_projector.",
                               "mm_projector."}) {
      if (StartsWith(name, prefix)) return true;
    }
    return false;
  }
  if (arch == GgufArch::kGemma2) return name == "lm_head.weight";  // llama.cpp ties the head
  if (arch == GgufArch::kGemma3) {
    // The text model's converter skips every multimodal tensor by these marks.
    for (const char* prefix : {"mlp", "vit.", "vpm.", "siglip2.", "multi_modal_projector.",
                               "vision_tower.", "multimodal_projector.", "vision_model."}) {
      if (StartsWith(name, prefix)) return true;
    }
    for (const char* part : {"visual.", "vision.", "audio.", "vision_", "audio_", "projector.",
                             "patch_embed", "patch_merger."}) {
      if (Contains(name, part)) return true;
    }
    return false;
  }
  for (const char* prefix : {"mlp", "multi_modal_projector", "vision_model", "audio_tower",
                             "model.vision_tower", "model.multi_modal_projector", "vision_tower."}) {
    if (StartsWith(name, prefix)) return true;
  }
  return arch == GgufArch::kQwen3 && Contains(name, "model.vision_");
}

// Gemma's own per-layer names (§3.1): its norms around the attention and the MLP.
const std::map<std::string, std::string>& GemmaStems() {
  static const std::map<std::string, std::string> stems = {
      {"post_attention_layernorm", "post_attention_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
  };
  return stems;
}

// Per-layer stems, HF -> GGUF.
const std::map<std::string, std::string>& LayerStems() {
  static const std::map<std::string, std::string> stems = {
      {"input_layernorm", "attn_norm"},        {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},          {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},     {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},     {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},           {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      // Phi-3's fused projections, copied as they are (§3.3d).
      {"self_attn.qkv_proj", "attn_qkv"},      {"mlp.gate_up_proj", "ffn_up"},
  };
  return stems;
}

// Whether the architecture's tensor map has the stem: Qwen3 alone has q/k norms, Phi-3 alone
// the fused projections (and no separate gate).
bool ArchHasStem(GgufArch arch, const std::string& hf_stem) {
  const bool fused = hf_stem == "self_attn.qkv_proj" || hf_stem == "mlp.gate_up_proj";
  if (arch == GgufArch::kPhi3) return hf_stem != "mlp.gate_proj" && !EndsWith(hf_stem, "_norm");
  if (fused) return false;
  if (arch == GgufArch::kGemma2) return !EndsWith(hf_stem, "_norm");
  return arch == GgufArch::kQwen3 || arch == GgufArch::kGemma3 || !EndsWith(hf_stem, "_norm");
}

// Source dtypes (the first three) and output types.
enum class Dtype { kF32, kF16, kBF16, kQ8_0 };

GgmlType GgmlOf(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32: return GgmlType::kF32;
    case Dtype::kF16: return GgmlType::kF16;
    case Dtype::kBF16: return GgmlType::kBF16;
    case Dtype::kQ8_0: return GgmlType::kQ8_0;
  }
  return GgmlType::kF32;
}
SourceDtype SourceOf(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF16: return SourceDtype::kF16;
    case Dtype::kBF16: return SourceDtype::kBF16;
    default: return SourceDtype::kF32;
  }
}
Encoding EncodingOf(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32: return Encoding::kF32;
    case Dtype::kF16: return Encoding::kF16;
    case Dtype::kBF16: return Encoding::kBF16;
    case Dtype::kQ8_0: return Encoding::kGgmlQ8_0;
  }
  return Encoding::kF32;
}
// Bytes of `elements` elements (whole blocks for Q8_0).
uint64_t Bytes(Dtype dtype, uint64_t elements) { return GgmlTensorBytes(GgmlOf(dtype), elements); }

std::optional<Dtype> ReadableDtype(StDtype dtype) {
  switch (dtype) {
    case StDtype::F32: return Dtype::kF32;
    case StDtype::F16: return Dtype::kF16;
    case StDtype::BF16: return Dtype::kBF16;
    default: return std::nullopt;
  }
}

// llama3 RoPE frequency factors (§3.3f), in float32 as the converter computes them.
std::string Llama3RopeFreqs(const GgufConfig& config) {
  const nlohmann::json& json = config.json;
  const nlohmann::json& rope = json.contains("rope_parameters") && json["rope_parameters"].is_object()
                                   ? json["rope_parameters"]
                                   : json["rope_scaling"];
  auto number = [](const nlohmann::json& j, const char* key, double fallback) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
  };
  const float base = static_cast<float>(number(json, "rope_theta", 10000.0));
  const float factor = static_cast<float>(number(rope, "factor", 8.0));
  const float low = static_cast<float>(number(rope, "low_freq_factor", 1.0));
  const float high = static_cast<float>(number(rope, "high_freq_factor", 4.0));
  const float old_context = static_cast<float>(number(json, "original_max_position_embeddings", 8192));
  const uint32_t dim = config.head_dim;
  const float low_wavelen = old_context / low;
  const float high_wavelen = old_context / high;
  std::string bytes;
  for (uint32_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float freq = 1.0f / std::pow(base, exponent);
    const float wavelen = static_cast<float>(2 * M_PI) / freq;
    float value;
    if (wavelen < high_wavelen) {
      value = 1.0f;
    } else if (wavelen > low_wavelen) {
      value = factor;
    } else {
      const float smooth = (old_context / wavelen - low) / (high - low);
      value = 1.0f / ((1.0f - smooth) / factor + smooth);
    }
    char raw[4];
    std::memcpy(raw, &value, 4);
    bytes.append(raw, 4);
  }
  return bytes;
}

// Phi-3's long-context RoPE factors (§3.3f): rope_factors_long and _short, F32 copies of
// rope_scaling's long_factor and short_factor, when it has them.
std::vector<GgufTensor> Phi3RopeFactors(const GgufConfig& config) {
  const nlohmann::json rope = RopeParameters(config.json);
  if (!rope.contains("long_factor") || rope["long_factor"].is_null() ||
      (rope["long_factor"].is_array() && rope["long_factor"].empty())) {
    return {};
  }
  std::vector<GgufTensor> out;
  for (const char* key : {"long_factor", "short_factor"}) {
    const nlohmann::json& factors = rope.value(key, nlohmann::json());
    if (!factors.is_array() || factors.size() * 2 != config.rope_dims) {
      throw FormatError("config.json: rope_scaling." + std::string(key) + " must hold " +
                        std::to_string(config.rope_dims / 2) + " numbers (rope dimensions / 2)");
    }
    GgufTensor t;
    t.name = std::string("rope_factors_") + (key[0] == 'l' ? "long" : "short") + ".weight";
    t.ne = {factors.size()};
    t.type = GgmlType::kF32;
    for (const nlohmann::json& f : factors) {
      if (!f.is_number()) throw FormatError("config.json: rope_scaling." + std::string(key) + " holds " + f.dump());
      const float value = static_cast<float>(f.get<double>());
      char raw[4];
      std::memcpy(raw, &value, 4);
      t.inline_bytes.append(raw, 4);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

uint64_t LlamaPermutedRow(uint64_t row, uint64_t rows, uint64_t heads) {
  const uint64_t d = rows / heads;
  const uint64_t h = row / d, q = row % d;
  return h * d + (q % 2) * (d / 2) + q / 2;
}

std::optional<std::string> GgufTensorName(const GgufConfig& config, const std::string& hf_name) {
  if (Skipped(config.arch, hf_name)) return std::nullopt;
  std::string name = hf_name;
  if (StartsWith(name, "language_model.")) name = name.substr(15);
  if (config.arch == GgufArch::kLlama && StartsWith(name, "text_model.")) name = name.substr(11);
  if (config.arch != GgufArch::kLlama) {
    for (size_t at; (at = name.find("language_model.")) != std::string::npos;) name.erase(at, 15);
  }
  std::string suffix;
  for (const char* s : {".weight", ".bias"}) {
    if (EndsWith(name, s)) {
      suffix = s;
      name.resize(name.size() - suffix.size());
      break;
    }
  }
  if (name == "model.embed_tokens") return "token_embd" + suffix;
  if (name == "model.norm") return "output_norm" + suffix;
  if (name == "lm_head") return "output" + suffix;
  const std::string layers = "model.layers.";
  if (StartsWith(name, layers)) {
    const size_t dot = name.find('.', layers.size());
    const std::string index = name.substr(layers.size(), dot - layers.size());
    if (dot != std::string::npos && !index.empty() &&
        index.find_first_not_of("0123456789") == std::string::npos) {
      const std::string hf_stem = name.substr(dot + 1);
      if (NormsStoreOnePlus(config.arch)) {
        auto gemma = GemmaStems().find(hf_stem);
        if (gemma != GemmaStems().end()) return "blk." + index + "." + gemma->second + suffix;
      }
      auto stem = LayerStems().find(hf_stem);
      if (stem != LayerStems().end() && ArchHasStem(config.arch, stem->first)) {
        return "blk." + index + "." + stem->second + suffix;
      }
    }
  }
  throw FormatError("tensor " + Quote(hf_name) + ": llama.cpp's converter has no " +
                    config.arch_name + " tensor for this name (conversion would fail)");
}

GgufTensors PlanGgufTensors(const ShardSet& set, const GgufConfig& config, GgufOuttype outtype) {
  struct Source {
    const SafetensorsTensor* tensor;
    uint32_t shard;
  };
  std::vector<Source> order;
  for (uint32_t i = 0; i < set.shards.size(); ++i) {
    std::vector<Source> shard;
    for (const SafetensorsTensor& t : set.shards[i].header.tensors) shard.push_back({&t, i});
    std::sort(shard.begin(), shard.end(),
              [](const Source& a, const Source& b) { return a.tensor->name < b.tensor->name; });
    order.insert(order.end(), shard.begin(), shard.end());
  }
  GgufTensors out;
  if (outtype == GgufOuttype::kAuto) {  // the first tensor of 2 or more dims decides
    outtype = GgufOuttype::kF16;
    for (const Source& s : order) {
      if (s.tensor->shape.size() >= 2) {
        if (s.tensor->dtype == StDtype::BF16) outtype = GgufOuttype::kBF16;
        break;
      }
    }
  }
  out.outtype = outtype;
  const Dtype wanted = outtype == GgufOuttype::kF32    ? Dtype::kF32
                       : outtype == GgufOuttype::kBF16  ? Dtype::kBF16
                       : outtype == GgufOuttype::kQ8_0 ? Dtype::kQ8_0
                                                        : Dtype::kF16;
  // LlamaFileType: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0, MOSTLY_BF16.
  out.file_type = wanted == Dtype::kF32    ? 0
                  : wanted == Dtype::kBF16 ? 32
                  : wanted == Dtype::kQ8_0 ? 7
                                           : 1;

  if (config.arch == GgufArch::kLlama && config.rope_type == "llama3") {
    GgufTensor freqs;
    freqs.name = "rope_freqs.weight";
    freqs.ne = {config.head_dim / 2};
    freqs.type = GgmlType::kF32;
    freqs.inline_bytes = Llama3RopeFreqs(config);
    out.tensors.push_back(std::move(freqs));
  }

  if (config.arch == GgufArch::kPhi3) {
    for (GgufTensor& factors : Phi3RopeFactors(config)) out.tensors.push_back(std::move(factors));
  }

  for (const Source& s : order) {
    const SafetensorsTensor& t = *s.tensor;
    const std::string& shard_file = set.shards[s.shard].file;
    std::optional<std::string> name = GgufTensorName(config, t.name);
    if (!name) continue;
    std::optional<Dtype> from = ReadableDtype(t.dtype);
    if (!from) {
      throw FormatError(shard_file + ": tensor " + Quote(t.name) + " is " +
                        std::string(StDtypeName(t.dtype)) +
                        ": the GGUF view reads F32, F16 and BF16 tensors");
    }
    if (t.shape.empty() || t.shape.size() > 4) {
      throw FormatError(shard_file + ": tensor " + Quote(t.name) + " has " +
                        std::to_string(t.shape.size()) + " dimensions: GGUF holds 1 to 4");
    }
    GgufTensor tensor;
    tensor.name = *name;
    tensor.ne.assign(t.shape.rbegin(), t.shape.rend());
    const bool f32_rule = t.shape.size() == 1 || EndsWith(*name, "_norm.weight") ||
                          !EndsWith(*name, ".weight");
    Dtype to = f32_rule ? Dtype::kF32 : wanted;
    // Q8_0 rows are whole 32-element blocks; others fall back to F16, as the converter does.
    if (to == Dtype::kQ8_0 && t.shape.back() % GgmlBlockElements(GgmlType::kQ8_0) != 0) {
      to = Dtype::kF16;
    }
    tensor.type = GgmlOf(to);
    if (*name == "token_embd.weight") out.token_rows = tensor.ne.size() > 1 ? tensor.ne[1] : 0;

    const uint64_t ne0 = tensor.ne[0];
    const uint64_t rows = tensor.elements() / std::max<uint64_t>(ne0, 1);
    const uint64_t source_start = set.shards[s.shard].header.data_start() + t.begin;
    // A conversion is a codec per tensor: every piece of it is a 1 x N run of the same N.
    uint32_t codec = kVerbatim;
    // Gemma's norms (every HF name ending in "norm.weight") are stored as 1 + w (§3.3b).
    const bool plus_one = NormsStoreOnePlus(config.arch) && EndsWith(t.name, "norm.weight");
    auto piece = [&](uint64_t out_offset, uint64_t elements, uint64_t source_element) {
      if ((*from != to || plus_one) && codec == kVerbatim) {
        TensorCodec c;
        c.from = SourceOf(*from);
        c.to = EncodingOf(to);
        c.add_one = plus_one;
        c.rows = 1;
        c.cols = elements;
        codec = static_cast<uint32_t>(out.codecs.size());
        out.codecs.push_back(c);
      }
      tensor.pieces.push_back({out_offset, Bytes(to, elements), s.shard,
                               source_start + Bytes(*from, source_element), codec});
    };
    const bool permuted = config.arch == GgufArch::kLlama &&
                          (StartsWith(*name, "blk.") &&
                           (EndsWith(*name, ".attn_q.weight") || EndsWith(*name, ".attn_q.bias") ||
                            EndsWith(*name, ".attn_k.weight") || EndsWith(*name, ".attn_k.bias")));
    if (permuted && tensor.elements() > 0) {
      const bool is_k = Contains(*name, ".attn_k.");
      const uint64_t heads = is_k ? config.head_count_kv : config.head_count;
      const bool bias = t.shape.size() == 1;
      const uint64_t n_rows = bias ? tensor.ne[0] : rows;
      const uint64_t row_elements = bias ? 1 : ne0;
      if (heads == 0 || n_rows % heads != 0 || (n_rows / heads) % 2 != 0) {
        throw FormatError(shard_file + ": tensor " + Quote(t.name) + ": " + std::to_string(n_rows) +
                          " rows do not split into " + std::to_string(heads) +
                          " heads of an even size (the LLaMA Q/K permutation)");
      }
      for (uint64_t r = 0; r < n_rows; ++r) {
        piece(Bytes(to, r * row_elements), row_elements,
              LlamaPermutedRow(r, n_rows, heads) * row_elements);
      }
    } else if (tensor.elements() > 0) {  // an empty tensor has no bytes, no pieces
      piece(0, tensor.elements(), 0);
    }
    out.total_params += tensor.elements();
    out.tensors.push_back(std::move(tensor));
  }
  for (const GgufTensor& tensor : out.tensors) {
    if (tensor.is_inline()) out.total_params += tensor.elements();
  }
  return out;
}

}  // namespace aprfs
