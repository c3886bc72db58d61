#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace aprfs {

// The weight_map of a model.safetensors.index.json that is well formed in every respect the
// JSON parse checks (an object whose "weight_map", present once, is an object of strings with
// no key twice), read in one SAX pass without a DOM (for a 100k-tensor model the DOM costs
// several times the file). nullopt on anything else: the DOM path then names the problem as it
// always has. The shard paths are not checked here.
struct WeightMapEntries {
  std::vector<std::pair<std::string, uint32_t>> tensors;  // name -> index in `shards`, by name
  std::vector<std::string> shards;                         // each path once, first seen first
};
std::optional<WeightMapEntries> ReadWellFormedWeightMap(std::string_view text);

}  // namespace aprfs
