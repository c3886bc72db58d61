#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "format/apr/apr_metadata.h"
#include "format/apr/apr_plan.h"
#include "format/model/shard_set.h"

namespace aprfs {

// A model turned into the APR file aprender's importer would write, without copying a byte:
// the plan refers to shard k's bytes as source k (the index in ShardSet::shards).
struct ImportedModel {
  FilePlan plan;
  uint64_t param_count = 0;
  bool tied_lm_head = false;  // lm_head.weight was added as a view of the embedding
};

// Checks the set (CheckShardSet), maps each dtype to its APR code, lays the data out in shard
// order, adds a tied lm_head.weight when the model has none, and fills the metadata as
// aprender's importer does, plus the embedded tokenizer. Throws FormatError naming the model,
// the file, the tensor and the rule.
ImportedModel ImportShardSet(const ShardSet& set);
// The same, taking the tensor names and shapes out of `set` instead of copying them, and
// dropping the index and each shard's tensor list once used: for a model of 100k tensors, the
// difference between holding them twice or once. `set` keeps its shard files, config and
// metadata; its tensors, index and tokenizer are gone (also when this throws). `released`,
// when given, is called each time a large part of them has been freed (the tensor lists, then
// the tokenizer), before the plan's large buffers are written: the caller can hand the freed
// heap back to the system there (format/ itself does no such thing).
ImportedModel ImportShardSet(ShardSet&& set, const std::function<void()>& released = nullptr);

// The metadata alone (exposed for tests and `aprfs inspect`). `tensors` gives tensor_shapes.
AprMetadata ImportMetadata(const ShardSet& set, uint64_t param_count, bool tied_lm_head,
                           const std::vector<AprTensorSpec>& tensors);

}  // namespace aprfs
