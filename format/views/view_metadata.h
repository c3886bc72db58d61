#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/apr/apr_metadata.h"
#include "format/apr/apr_plan.h"
#include "format/model/shard_set.h"

namespace aprfs {

// The metadata aprender's importer writes under --quantize (apr-quantization.md §7); `stem` is
// the output file's stem, which it writes as `name`. Without config.json (--allow-no-config)
// the typed config fields are absent.

// The streaming sharded import (`streaming_sharded_import`): the architecture it infers, the
// config's identity and dims (no head_dim, no MoE fields), param_count 0, and only the
// tokenizer in `custom`.
// `tokenizer` is the model's (moved out of the set: its lists are freed as they are spelled).
AprMetadata ShardedImportMetadata(const ShardSet& set, const std::string& stem,
                                  EmbeddedTokenizer tokenizer);

// The single-file import (`write_apr_file`): model_type of the CLI's default --arch ("Auto"),
// the config's identity, dims, head_dim and MoE fields, param_count of the written tensors, and
// in `custom` tensor_shapes, source_metadata, tied_embeddings and the tokenizer.
AprMetadata SingleFileImportMetadata(const ShardSet& set, const std::string& stem,
                                     uint64_t param_count, bool tied_lm_head,
                                     const std::vector<AprTensorSpec>& tensors);

}  // namespace aprfs
