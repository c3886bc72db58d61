#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace aprfs {

// The files a model is offered as. kApr is the model as its shards hold it (FP8 dequantized);
// the others are what `apr import --quantize q4k|fp16|int8|int4` would write.
enum class ViewKind : uint8_t { kApr, kQ4k, kF16, kInt8, kInt4 };
inline constexpr size_t kViewCount = 5;
inline constexpr std::array<ViewKind, kViewCount> kAllViews = {
    ViewKind::kApr, ViewKind::kQ4k, ViewKind::kF16, ViewKind::kInt8, ViewKind::kInt4};

// "apr", "q4k", "f16", "int8", "int4".
std::string_view ViewName(ViewKind view);
// The view a name stands for: the names above, and aprender's spellings of the same options
// ("q4_k", "fp16").
std::optional<ViewKind> ParseViewName(std::string_view name);
// "phi-4.apr", "phi-4.q4k.apr".
std::string ViewFileName(std::string_view model_name, ViewKind view);
// The file name stem aprender would have been given: "phi-4", "phi-4.q4k".
std::string ViewStem(std::string_view model_name, ViewKind view);
// "phi-4.q4k.apr" -> ("phi-4", kQ4k); "phi-4.apr" -> ("phi-4", kApr); else nullopt. A name
// with a view suffix is also a valid plain name ("x.q4k" could be a model): callers try the
// plain reading first.
std::optional<std::pair<std::string, ViewKind>> SplitViewFileName(std::string_view file_name);
// Index in kAllViews.
constexpr size_t ViewIndex(ViewKind view) { return static_cast<size_t>(view); }

}  // namespace aprfs
