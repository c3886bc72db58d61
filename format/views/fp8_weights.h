#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "format/codec/tensor_codec.h"
#include "format/model/shard_set.h"

namespace aprfs {

// A tensor of a shard set: shards[shard].header.tensors[index].
struct TensorRef {
  uint32_t shard = 0;
  uint32_t index = 0;
};

// The FP8 weights of a model and their block scales (apr-quantization.md §9.2): every F8_E4M3
// tensor `X` must have a sibling `X_scale_inv` (F32, or one-byte E8M0/U8 powers of two) of shape
// [ceil(R/br), ceil(C/bc)], anywhere in the model; (br, bc) is config.json's
// quantization_config.weight_block_size, default 128 x 128. Every view dequantizes such a
// weight to BF16 and never shows its scale tensor (DeepSeek's fp8_cast_bf16 does the same).
class Fp8Weights {
 public:
  // Pairs the model's FP8 weights with their scales. Throws FormatError naming the model's
  // shard, the tensor and the rule: an FP8 tensor without scales, not 2-D, or with scales of
  // the wrong shape or dtype.
  static Fp8Weights Find(const ShardSet& set);

  bool empty() const { return scales_.empty(); }
  // Whether this tensor is the scale tensor of an FP8 weight (consumed: never emitted).
  bool IsScale(TensorRef tensor) const;
  // For an FP8 weight of shape `shape`, the codec that dequantizes it to BF16 (§9.4); its
  // scales are read from source `scale_source` (shard k of the set is source k of the plan).
  // Needs nothing of the set but what Find saw: callers may have moved its tensors since.
  std::optional<TensorCodec> DequantCodec(TensorRef tensor, const std::vector<uint64_t>& shape) const;

 private:
  struct Scales {
    uint32_t shard;
    uint64_t offset;  // absolute, in the shard file
    ScaleDtype dtype;
  };
  // Per shard, per tensor: -1, or (for an FP8 weight) its position in scales_.
  std::vector<std::vector<int32_t>> scales_of_;
  std::vector<std::vector<bool>> is_scale_;
  std::vector<Scales> scales_;
  uint64_t block_rows_ = 128;
  uint64_t block_cols_ = 128;
};

}  // namespace aprfs
