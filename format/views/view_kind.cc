#include "format/views/view_kind.h"

namespace aprfs {

std::string_view ViewName(ViewKind view) {
  switch (view) {
    case ViewKind::kApr: return "apr";
    case ViewKind::kQ4k: return "q4k";
    case ViewKind::kF16: return "f16";
    case ViewKind::kInt8: return "int8";
    case ViewKind::kInt4: return "int4";
    case ViewKind::kSafetensors: return "safetensors";
    case ViewKind::kGguf: return "gguf";
    case ViewKind::kGgufF16: return "gguf-f16";
    case ViewKind::kGgufBf16: return "gguf-bf16";
    case ViewKind::kGgufF32: return "gguf-f32";
    case ViewKind::kGgufQ8_0: return "gguf-q8_0";
    case ViewKind::kGgufQ4_K_M: return "gguf-q4_k_m";
  }
  return "?";
}

std::optional<ViewKind> ParseViewName(std::string_view name) {
  for (ViewKind view : kAllViews) {
    if (name == ViewName(view)) return view;
  }
  if (name == "q4_k") return ViewKind::kQ4k;
  if (name == "fp16") return ViewKind::kF16;
  return std::nullopt;
}

std::string KnownViewNames() {
  std::string names;
  for (ViewKind view : kAllViews) names += (names.empty() ? "" : ", ") + std::string(ViewName(view));
  return names;
}

std::string ViewStem(std::string_view model_name, ViewKind view) {
  std::string stem(model_name);
  if (view != ViewKind::kApr) stem += "." + std::string(ViewName(view));
  return stem;
}

namespace {

// The outtype in a GGUF file name, as llama.cpp's tools name their files.
std::string_view GgufInfix(ViewKind view) {
  switch (view) {
    case ViewKind::kGgufF16: return "F16";
    case ViewKind::kGgufBf16: return "BF16";
    case ViewKind::kGgufF32: return "F32";
    case ViewKind::kGgufQ8_0: return "Q8_0";
    case ViewKind::kGgufQ4_K_M: return "Q4_K_M";
    default: return "";
  }
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() > suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::string ViewFileName(std::string_view model_name, ViewKind view) {
  if (view == ViewKind::kSafetensors) return std::string(model_name) + ".safetensors";
  if (IsGgufView(view)) {
    std::string_view infix = GgufInfix(view);
    return std::string(model_name) + (infix.empty() ? "" : "." + std::string(infix)) + ".gguf";
  }
  return ViewStem(model_name, view) + ".apr";
}

std::optional<std::pair<std::string, ViewKind>> SplitViewFileName(std::string_view file_name) {
  constexpr std::string_view kSafetensors = ".safetensors";
  if (EndsWith(file_name, kSafetensors)) {
    return std::make_pair(std::string(file_name.substr(0, file_name.size() - kSafetensors.size())),
                          ViewKind::kSafetensors);
  }
  if (EndsWith(file_name, ".gguf")) {
    std::string_view stem = file_name.substr(0, file_name.size() - 5);
    for (ViewKind view : kAllViews) {
      if (GgufInfix(view).empty()) continue;
      const std::string suffix = "." + std::string(GgufInfix(view));
      if (EndsWith(stem, suffix)) {
        return std::make_pair(std::string(stem.substr(0, stem.size() - suffix.size())), view);
      }
    }
    return std::make_pair(std::string(stem), ViewKind::kGguf);
  }
  constexpr std::string_view kExtension = ".apr";
  if (!EndsWith(file_name, kExtension)) return std::nullopt;
  std::string_view stem = file_name.substr(0, file_name.size() - kExtension.size());
  size_t dot = stem.rfind('.');
  if (dot != std::string_view::npos && dot > 0) {
    for (ViewKind view : kAllViews) {  // canonical names only: one file name per view
      if (view != ViewKind::kApr && IsAprView(view) && stem.substr(dot + 1) == ViewName(view)) {
        return std::make_pair(std::string(stem.substr(0, dot)), view);
      }
    }
  }
  return std::make_pair(std::string(stem), ViewKind::kApr);
}

}  // namespace aprfs
