#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/apr/apr_plan.h"
#include "format/model/shard_set.h"
#include "format/model/tokenizer_embed.h"

namespace aprfs {

// Pieces of the metadata JSON that every view's importer writes the same way.

uint64_t ElementCount(const std::vector<uint64_t>& shape);

// custom.tensor_shapes: {"name":[dims],...} in name order; of a name given twice, the last.
std::string TensorShapesJson(const std::vector<AprTensorSpec>& tensors);

// custom.source_metadata: the shards' `__metadata__` strings (the first shard that sets a key
// wins), or nullopt when there are none.
std::optional<std::string> SourceMetadataJson(const ShardSet& set);

// The `tokenizer.*` keys of `custom` (vocabulary by id, merges, scores, model type, bos/eos).
void AddTokenizerKeys(const EmbeddedTokenizer& tokenizer, std::map<std::string, std::string>& custom);
// The same, freeing each list of `tokenizer` once it is spelled (a 128k vocabulary and its
// JSON are megabytes each).
void AddTokenizerKeys(EmbeddedTokenizer&& tokenizer, std::map<std::string, std::string>& custom);

}  // namespace aprfs
