#include "format/views/import_rules.h"

#include "format/apr/apr_layout.h"

namespace aprfs {
namespace {

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// gdn_keeps_full_precision: the state-space parameters of gated delta-net layers.
bool GdnKeepsFullPrecision(std::string_view name) {
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('.', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view segment = name.substr(start, end - start);
    if (Contains(segment, "conv1d")) return true;
    if (segment == "A_log" || segment == "ssm_a" || segment == "dt_bias" ||
        segment == "ssm_dt_bias") {
      return true;
    }
    start = end + 1;
  }
  return Contains(name, "ssm_dt.bias");
}

uint8_t CodeOf(Encoding encoding) {
  switch (encoding) {
    case Encoding::kF32: return kAprF32;
    case Encoding::kF16: return kAprF16;
    case Encoding::kBF16: return kAprBf16;
    case Encoding::kQ4K: return kAprQ4K;
    case Encoding::kAprQ8: return kAprQ8;
    case Encoding::kAprQ4: return kAprQ4;
    case Encoding::kGgmlQ8_0:
    case Encoding::kGgmlQ5_0:
    case Encoding::kGgmlQ4K:
    case Encoding::kGgmlQ5K:
    case Encoding::kGgmlQ6K: break;  // GGUF only: never in an APR file
  }
  return kAprF32;
}

}  // namespace

bool SkipsQuantization(std::string_view name, uint64_t elements) {
  for (std::string_view pattern : {"bias", "layernorm", "layer_norm", "norm.weight"}) {
    if (Contains(name, pattern)) return true;
  }
  return elements < 1024 || GdnKeepsFullPrecision(name);
}

bool IsOutputHead(std::string_view name) { return name == "lm_head.weight" || name == "output.weight"; }

bool IsTokenEmbedding(std::string_view name) {
  return Contains(name, "embed_tokens.weight") || name == "token_embd.weight" || name == "wte.weight";
}

TensorDispatch Dispatch(ViewKind view, ImportPath path, SourceDtype from, std::string_view name,
                        uint64_t elements) {
  auto encode = [](Encoding to) { return TensorDispatch{CodeOf(to), to}; };
  auto verbatim = [](uint8_t code) { return TensorDispatch{code, std::nullopt}; };
  const bool half = from == SourceDtype::kF16 || from == SourceDtype::kBF16;
  switch (view) {
    case ViewKind::kApr:
    case ViewKind::kSafetensors:  // not APR views: never dispatched
    case ViewKind::kGguf:
    case ViewKind::kGgufF16:
    case ViewKind::kGgufBf16:
    case ViewKind::kGgufF32:
    case ViewKind::kGgufQ8_0:
    case ViewKind::kGgufQ4_K_M:
      break;
    case ViewKind::kF16:
      // Path H passes F16 and BF16 through untouched (BF16 stays BF16); path S converts every
      // tensor, which leaves F16 bytes as they were (NaN and Inf are refused before).
      if (path == ImportPath::kSharded && half) {
        return verbatim(from == SourceDtype::kF16 ? kAprF16 : kAprBf16);
      }
      if (from == SourceDtype::kF16) return verbatim(kAprF16);
      return encode(Encoding::kF16);
    case ViewKind::kQ4k:
    case ViewKind::kInt8:
    case ViewKind::kInt4:
      if (SkipsQuantization(name, elements)) {
        return from == SourceDtype::kF32 ? verbatim(kAprF32) : encode(Encoding::kF32);
      }
      return encode(view == ViewKind::kQ4k    ? Encoding::kQ4K
                    : view == ViewKind::kInt8 ? Encoding::kAprQ8
                                              : Encoding::kAprQ4);
  }
  return from == SourceDtype::kF32 ? verbatim(kAprF32) : encode(Encoding::kF32);
}

}  // namespace aprfs
