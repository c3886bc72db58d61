#include "format/gguf/gguf_quantize.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "format/error.h"

namespace aprfs {
namespace {

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The layer of "blk.N.*", -1 for the others (llama.cpp's weight_name_comparer).
int LayerOf(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

// ggml_n_dims: trailing dimensions of 1 do not count.
size_t Dims(const GgufTensor& t) {
  size_t dims = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) {
    if (t.ne[i] > 1) dims = i + 1;
  }
  return dims;
}

// tensor_allows_quantization, for the names the mapped architectures have.
bool Quantizable(const GgufTensor& t) {
  if (Dims(t) < 2 || !EndsWith(t.name, "weight")) return false;
  for (const char* kept : {"_norm.weight", "ffn_gate_inp.weight", "position_embd.weight",
                           "token_types.weight"}) {
    if (Contains(t.name, kept)) return false;
  }
  return true;
}

enum class Category { kOutput, kTokenEmbd, kAttnV, kFfnDown, kOther };

// tensor_get_category, the categories Q4_K_M looks at (attn_qkv and attn_kv_b count as attn_v;
// the categories it tests before ffn_down never share a name with it in these architectures).
Category CategoryOf(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    return Category::kTokenEmbd;
  }
  if (Contains(name, "attn_qkv.weight") || Contains(name, "attn_kv_b.weight") ||
      Contains(name, "attn_v.weight")) {
    return Category::kAttnV;
  }
  return Contains(name, "ffn_down") ? Category::kFfnDown : Category::kOther;
}

bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// tensor_type_fallback: rows that are not whole blocks of the type take a smaller block.
GgmlType Fallback(const GgufTensor& t, GgmlType type) {
  const uint64_t ne0 = t.ne[0];
  if (ne0 % GgmlBlockElements(type) == 0) return type;
  switch (type) {
    case GgmlType::kQ4K: type = GgmlType::kQ5_0; break;
    case GgmlType::kQ6K: type = GgmlType::kQ8_0; break;
    case GgmlType::kQ8_0: break;
    default:  // Q5_K -> Q5_1: only a 70B model with odd rows; Q5_1 has no encoder here
      throw FormatError("tensor " + Quote(t.name) + ": rows of " + std::to_string(ne0) +
                        " elements would need llama-quantize's Q5_1 fallback, which the " +
                        "Q4_K_M view does not write");
  }
  return ne0 % GgmlBlockElements(type) == 0 ? type : GgmlType::kF16;
}

Encoding EncodingOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ5_0: return Encoding::kGgmlQ5_0;
    case GgmlType::kQ8_0: return Encoding::kGgmlQ8_0;
    case GgmlType::kQ4K: return Encoding::kGgmlQ4K;
    case GgmlType::kQ5K: return Encoding::kGgmlQ5K;
    case GgmlType::kQ6K: return Encoding::kGgmlQ6K;
    default: return Encoding::kF16;
  }
}

// The tensor's F16 (or F32) pieces re-encoded as `type`: each piece (the whole tensor, or one
// gathered row) covers whole blocks, so it becomes one piece of the new type from the same
// source run. Values go through f16 where the F16 file holds them as f16.
void Reencode(GgufTensor& t, GgmlType type, std::vector<TensorCodec>& codecs) {
  const SourceDtype stored = t.type == GgmlType::kF16 ? SourceDtype::kF16 : SourceDtype::kF32;
  std::map<std::pair<SourceDtype, uint64_t>, uint32_t> codec_of;  // (from, elements) -> codec
  uint64_t out_offset = 0;
  for (DataExtent& piece : t.pieces) {
    const uint64_t elements = piece.length / GgmlBlockBytes(t.type);
    const SourceDtype from = piece.codec == kVerbatim ? stored : codecs[piece.codec].from;
    auto [it, added] = codec_of.emplace(std::pair{from, elements}, 0);
    if (added) {
      TensorCodec c;
      c.from = from;
      c.to = EncodingOf(type);
      c.rows = 1;
      c.cols = elements;
      c.round_to_f16 = stored == SourceDtype::kF16 && from != SourceDtype::kF16;
      it->second = static_cast<uint32_t>(codecs.size());
      codecs.push_back(c);
    }
    piece.offset = out_offset;
    piece.length = GgmlTensorBytes(type, elements);
    piece.codec = it->second;
    out_offset += piece.length;
  }
  t.type = type;
}

}  // namespace

void QuantizeQ4_K_M(const GgufConfig& config, GgufTensors& planned) {
  std::vector<GgufTensor>& tensors = planned.tensors;
  // llama-quantize's order, except that generated tensors (llama3's rope_freqs) stay first:
  // their bytes live in the plan's prefix, and ggml wants data in info order.
  std::stable_sort(tensors.begin(), tensors.end(), [](const GgufTensor& a, const GgufTensor& b) {
    if (a.is_inline() != b.is_inline()) return a.is_inline();
    const int la = LayerOf(a.name), lb = LayerOf(b.name);
    return la != lb ? la < lb : a.name < b.name;
  });
  bool tied = true;
  int attn_v_count = 0;
  for (const GgufTensor& t : tensors) {
    if (CategoryOf(t.name) == Category::kOutput) tied = false;
    if (CategoryOf(t.name) == Category::kAttnV) ++attn_v_count;
  }
  const int layers = static_cast<int>(config.block_count);
  const bool is_70b = layers == 80 && ((config.arch == GgufArch::kLlama &&
                                        config.head_count != config.head_count_kv) ||
                                       config.arch == GgufArch::kQwen2);
  int attn_v = 0, ffn_down = 0;
  for (GgufTensor& t : tensors) {
    if (!Quantizable(t) || t.is_inline()) continue;
    GgmlType type = GgmlType::kQ4K;
    switch (CategoryOf(t.name)) {
      case Category::kOutput:
      case Category::kTokenEmbd:
        if (CategoryOf(t.name) == Category::kTokenEmbd && !tied) break;
        type = t.ne[0] % GgmlBlockElements(GgmlType::kQ4K) != 0 ? GgmlType::kQ8_0 : GgmlType::kQ6K;
        break;
      case Category::kAttnV:
        if (UseMoreBits(attn_v, attn_v_count)) {
          type = GgmlType::kQ6K;
        } else if (is_70b) {
          type = GgmlType::kQ5K;
        }
        ++attn_v;
        break;
      case Category::kFfnDown:
        if (UseMoreBits(ffn_down, layers)) type = GgmlType::kQ6K;
        ++ffn_down;
        break;
      case Category::kOther:
        break;
    }
    type = Fallback(t, type);
    if (type != t.type) Reencode(t, type, planned.codecs);
  }
  planned.file_type = 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
}

void ResetQuantizeKeys(uint32_t file_type, GgufMetadata& kv) {
  kv.MoveToEnd("general.quantization_version");
  kv.U32("general.quantization_version", 2);
  kv.MoveToEnd("general.file_type");
  kv.U32("general.file_type", file_type);
}

}  // namespace aprfs
