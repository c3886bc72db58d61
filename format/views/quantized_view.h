#pragma once

#include <string>

#include "format/apr/apr_plan.h"
#include "format/model/shard_set.h"
#include "format/views/import_rules.h"
#include "format/views/view_kind.h"

namespace aprfs {

// The path aprender's importer takes for this model (apr-quantization.md §2.2): an index means
// the streaming sharded import; one shard without an index, the single-file import. A folder of
// several shards without an index (which aprender cannot import) is taken the sharded way.
ImportPath ImportPathOf(const ShardSet& set);

// What the single-file path decides from tensor values (§3.4, §3.5): found by a scan.
struct SingleFileFacts {
  bool lm_head_mostly_zero = false;  // lm_head.weight holds >= 99.9 % zeros: tied after all
};

// A quantized or dtype-converted view: exactly what `apr import MODEL --quantize OPTION -o
// STEM.apr` writes (default --arch, --allow-no-config), planned from the headers alone. FP8
// weights are dequantized to BF16 first (§9.5); the single-file path's value checks (§3.1, the
// int4 density rule) are not part of the plan: see value_checks.h.
struct QuantizedView {
  FilePlan plan;
  ImportPath path = ImportPath::kSharded;
};

// `view` is not kApr; `stem` is the output file's stem, which aprender writes as the model's
// name. Throws FormatError naming the shard, the tensor and the rule where aprender would
// refuse: a dtype it cannot convert to f32, an architecture whose tensors it renames or splits.
// Takes the set by value: a caller that moves it in lets a large model's names be held once.
QuantizedView PlanQuantizedView(ShardSet set, ViewKind view, const std::string& stem,
                                const SingleFileFacts& facts = {});

}  // namespace aprfs
