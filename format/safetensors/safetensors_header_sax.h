#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/safetensors/safetensors_header.h"

namespace aprfs {

// The entries of a safetensors header read in one SAX pass, in file order.
struct SafetensorsEntries {
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads a header that is well formed in every respect the JSON parse checks (syntax, shapes of
// the entries, field types, dtypes, no name or field twice) without building a DOM. Returns
// nullopt on anything else, so that the strict DOM path can name the first problem exactly as
// it always has: this is a fast path, never a second set of rules.
std::optional<SafetensorsEntries> ReadWellFormedSafetensorsEntries(std::string_view header_json);

}  // namespace aprfs
