#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/model/model_config.h"
#include "format/safetensors/safetensors_header.h"
#include "format/model/tokenizer_embed.h"

namespace aprfs {

inline constexpr std::string_view kWeightIndexFile = "model.safetensors.index.json";
inline constexpr std::string_view kSingleShardFile = "model.safetensors";

// model.safetensors.index.json: which shard holds each tensor.
struct WeightIndex {
  // Tensor name -> shard (index in shard_files), sorted by name, each name once. Compact on
  // purpose: a large model's index has 100k entries naming the same few shards.
  std::vector<std::pair<std::string, uint32_t>> weight_map;
  std::vector<std::string> shard_files;  // distinct values, sorted byte-wise

  // The shard file `tensor` is mapped to, or null.
  const std::string* ShardOf(std::string_view tensor) const;
};

// Parses the index and checks every shard name: relative, inside the model folder (no `..`
// segment, not absolute, no backslash or NUL). Throws FormatError naming `file`.
WeightIndex ParseWeightIndex(std::string_view text, std::string_view file);

// One shard as read from storage.
struct Shard {
  std::string file;  // path relative to the model folder
  uint64_t size = 0;
  SafetensorsHeader header;
};

// One model: its shards in data order plus what config.json and tokenizer.json say.
struct ShardSet {
  std::string name;                    // the model's name, e.g. "phi-4"
  std::optional<std::string> source;   // provenance URI, e.g. "hf://microsoft/phi-4"
  std::optional<WeightIndex> index;    // when the model has model.safetensors.index.json
  std::vector<Shard> shards;
  std::optional<ModelConfig> config;   // when config.json exists
  EmbeddedTokenizer tokenizer;         // empty without tokenizer.json
};

// The cross-checks between the index and the shards' headers: a tensor the index maps to a
// shard that lacks it, a tensor present in two shards. Throws FormatError naming the files and
// the tensor.
void CheckShardSet(const ShardSet& set);

}  // namespace aprfs
