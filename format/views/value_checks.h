#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/codec/tensor_codec.h"
#include "format/model/shard_set.h"
#include "format/views/quantized_view.h"
#include "format/views/view_kind.h"

namespace aprfs {

// The single-file import looks at tensor values before it writes anything under --quantize
// (apr-quantization.md §3.1, §3.4, §5.3): NaN, Inf or |mean| > 100 in any tensor aborts the
// import, an lm_head.weight of >= 99.9 % zeros is replaced by the embedding, and (int4) a tensor
// whose 4-bit codes are > 99 % zero aborts it. A view of such a model is decided by a scan of
// every tensor, once.

// One tensor to scan: its f32 values are DecodeElements(codec, ...) of its source bytes.
struct ScanItem {
  std::string name;
  TensorCodec codec;  // `from`, shape and FP8 scales; `to` is unused
  uint32_t source = 0;
  uint64_t source_offset = 0;
};
// The tensors of a single-file model in name order (FP8 scales consumed). Throws FormatError
// like PlanQuantizedView.
std::vector<ScanItem> SingleFileScanItems(const ShardSet& set);

// What the checks need of one tensor's values, accumulated piece by piece in element order.
struct ValueStats {
  uint64_t elements = 0;
  uint64_t nans = 0;
  uint64_t infinities = 0;
  uint64_t zeros = 0;
  uint64_t finite = 0;
  double finite_sum = 0;      // in element order, in binary64, as aprender sums
  uint64_t q4_zero_codes = 0;  // elements whose AprQ4 code is 8 (zero), block by block

  // `values` are the next `n` elements; pieces must start on a multiple of 32 elements (an
  // AprQ4 block), except after the tensor's last one.
  void Add(const float* values, size_t n, const codec::CodecKernels& kernels);
};

// What the scan decides for the model's quantized views.
struct SingleFileVerdict {
  SingleFileFacts facts;
  std::optional<std::string> refusal;       // every quantized view: the tensor and the rule
  std::optional<std::string> int4_refusal;  // the int4 view only (density rule)
};
// `stats[i]` belongs to `items[i]`.
SingleFileVerdict JudgeSingleFile(const std::vector<ScanItem>& items,
                                  const std::vector<ValueStats>& stats);

}  // namespace aprfs
