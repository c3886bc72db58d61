#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace aprfs {

// The files a model is offered as. kApr is the model as its shards hold it (FP8 dequantized);
// kQ4k..kInt4 are what `apr import --quantize q4k|fp16|int8|int4` would write; kSafetensors is
// the shards merged into one safetensors file; kGguf* what llama.cpp's convert_hf_to_gguf.py
// writes with --outtype auto|f16|bf16|f32|q8_0, and kGgufQ4_K_M what llama-quantize makes of
// its F16 file.
enum class ViewKind : uint8_t {
  kApr, kQ4k, kF16, kInt8, kInt4, kSafetensors,
  kGguf, kGgufF16, kGgufBf16, kGgufF32, kGgufQ8_0, kGgufQ4_K_M
};
inline constexpr size_t kViewCount = 12;
inline constexpr std::array<ViewKind, kViewCount> kAllViews = {
    ViewKind::kApr,      ViewKind::kQ4k,     ViewKind::kF16,         ViewKind::kInt8,
    ViewKind::kInt4,     ViewKind::kSafetensors, ViewKind::kGguf,    ViewKind::kGgufF16,
    ViewKind::kGgufBf16, ViewKind::kGgufF32, ViewKind::kGgufQ8_0,    ViewKind::kGgufQ4_K_M};

// "apr", "q4k", "f16", "int8", "int4", "safetensors", "gguf", "gguf-f16", "gguf-bf16",
// "gguf-f32", "gguf-q8_0", "gguf-q4_k_m".
std::string_view ViewName(ViewKind view);
// The view a name stands for: the names above, and aprender's spellings of the same options
// ("q4_k", "fp16").
std::optional<ViewKind> ParseViewName(std::string_view name);
// "apr, q4k, f16, int8, int4, safetensors": for messages.
std::string KnownViewNames();
// "phi-4.apr", "phi-4.q4k.apr", "phi-4.safetensors", "phi-4.gguf", "phi-4.BF16.gguf", "phi-4.Q4_K_M.gguf".
std::string ViewFileName(std::string_view model_name, ViewKind view);
// The file name stem aprender would have been given: "phi-4", "phi-4.q4k".
std::string ViewStem(std::string_view model_name, ViewKind view);
// "phi-4.q4k.apr" -> ("phi-4", kQ4k); "phi-4.apr" -> ("phi-4", kApr); "phi-4.safetensors" ->
// ("phi-4", kSafetensors); "phi-4.F16.gguf" -> ("phi-4", kGgufF16); else nullopt. A name with a view suffix is also a valid plain name
// ("x.q4k" could be a model): callers try the plain reading first.
std::optional<std::pair<std::string, ViewKind>> SplitViewFileName(std::string_view file_name);
// Whether the view's file is an APR file (the others have formats of their own).
constexpr bool IsAprView(ViewKind view) { return view <= ViewKind::kInt4; }
constexpr bool IsGgufView(ViewKind view) { return view >= ViewKind::kGguf; }
// Index in kAllViews.
constexpr size_t ViewIndex(ViewKind view) { return static_cast<size_t>(view); }

}  // namespace aprfs
