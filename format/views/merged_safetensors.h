#pragma once

#include <string_view>

#include "format/model/shard_set.h"
#include "format/plan/file_plan.h"

namespace aprfs {

// NAME.safetensors: every tensor of every shard in one safetensors file, as the official
// writer lays out a merged state dict (gguf-view.md §6): `__metadata__` first with
// "format": "pt" (or the shards' own metadata when they all agree), tensors ordered by element
// size descending then name (each tensor then starts at a multiple of its element size), data
// contiguous with no padding, the JSON header compact and padded with spaces to a multiple of
// 8 bytes. Every data byte is a verbatim extent of a shard: nothing is computed.
// Source i of the plan is set.shards[i]. Throws FormatError when the header would exceed what
// the official reader accepts (100 MB).
FilePlan PlanMergedSafetensors(const ShardSet& set);

}  // namespace aprfs
