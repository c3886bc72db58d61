#include "format/views/fp8_weights.h"

#include <algorithm>
#include <limits>
#include <string>

#include "format/error.h"

namespace aprfs {
namespace {

constexpr std::string_view kScaleSuffix = "_scale_inv";

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

Fp8Weights Fp8Weights::Find(const ShardSet& set) {
  Fp8Weights found;
  if (set.config && set.config->fp8_block) {
    found.block_rows_ = set.config->fp8_block->first;
    found.block_cols_ = set.config->fp8_block->second;
    if (found.block_rows_ > std::numeric_limits<uint32_t>::max() ||
        found.block_cols_ > std::numeric_limits<uint32_t>::max()) {
      throw FormatError("config.json: quantization_config.weight_block_size " +
                        std::to_string(found.block_rows_) + " x " +
                        std::to_string(found.block_cols_) + " is not a usable block size");
    }
  }
  bool any = false;
  for (const Shard& shard : set.shards) {
    for (const SafetensorsTensor& tensor : shard.header.tensors) any |= tensor.dtype == StDtype::F8_E4M3;
  }
  if (!any) return found;

  // Every tensor by name, to find each weight's sibling without a hash map of every name.
  struct Named {
    const std::string* name;
    TensorRef ref;
  };
  std::vector<Named> by_name;
  found.scales_of_.resize(set.shards.size());
  found.is_scale_.resize(set.shards.size());
  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    const auto& tensors = set.shards[s].header.tensors;
    found.scales_of_[s].assign(tensors.size(), -1);
    found.is_scale_[s].assign(tensors.size(), false);
    for (uint32_t i = 0; i < tensors.size(); ++i) by_name.push_back({&tensors[i].name, {s, i}});
  }
  std::sort(by_name.begin(), by_name.end(),
            [](const Named& a, const Named& b) { return *a.name < *b.name; });

  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    const Shard& shard = set.shards[s];
    for (uint32_t i = 0; i < shard.header.tensors.size(); ++i) {
      const SafetensorsTensor& weight = shard.header.tensors[i];
      if (weight.dtype != StDtype::F8_E4M3) continue;
      auto fail = [&](const std::string& rule) {
        throw FormatError("shard " + Quote(shard.file) + ", tensor " + Quote(weight.name) + ": " +
                          rule);
      };
      const std::string scale_name = weight.name + std::string(kScaleSuffix);
      auto it = std::lower_bound(by_name.begin(), by_name.end(), scale_name,
                                 [](const Named& n, const std::string& name) { return *n.name < name; });
      if (it == by_name.end() || *it->name != scale_name) {
        fail("an F8_E4M3 weight is dequantized with its block scales " + Quote(scale_name) +
             " (the DeepSeek/transformers FP8 convention), and the model has no such tensor");
      }
      if (weight.shape.size() != 2) {
        fail("an F8_E4M3 weight with block scales must be 2-D, not " + ShapeText(weight.shape));
      }
      const SafetensorsTensor& scale = set.shards[it->ref.shard].header.tensors[it->ref.index];
      if (scale.dtype != StDtype::F32 && scale.dtype != StDtype::F8_E8M0 &&
          scale.dtype != StDtype::U8) {
        fail("its scales " + Quote(scale_name) + " are " + std::string(StDtypeName(scale.dtype)) +
             "; F32 or one-byte powers of two (F8_E8M0, U8) are expected");
      }
      const std::vector<uint64_t> expected = {
          (weight.shape[0] + found.block_rows_ - 1) / found.block_rows_,
          (weight.shape[1] + found.block_cols_ - 1) / found.block_cols_};
      if (scale.shape != expected) {
        fail("its scales " + Quote(scale_name) + " have shape " + ShapeText(scale.shape) +
             "; blocks of " + std::to_string(found.block_rows_) + " x " +
             std::to_string(found.block_cols_) + " need " + ShapeText(expected));
      }
      if (found.scales_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        fail("too many FP8 weights");
      }
      found.scales_of_[s][i] = static_cast<int32_t>(found.scales_.size());
      found.scales_.push_back({it->ref.shard, set.shards[it->ref.shard].header.data_start() + scale.begin,
                               scale.dtype == StDtype::F32 ? ScaleDtype::kF32 : ScaleDtype::kE8M0});
      found.is_scale_[it->ref.shard][it->ref.index] = true;
    }
  }
  return found;
}

bool Fp8Weights::IsScale(TensorRef tensor) const {
  return !scales_.empty() && is_scale_[tensor.shard][tensor.index];
}

std::optional<TensorCodec> Fp8Weights::DequantCodec(TensorRef tensor,
                                                    const std::vector<uint64_t>& shape) const {
  if (scales_.empty() || scales_of_[tensor.shard][tensor.index] < 0) return std::nullopt;
  const Scales& scales = scales_[scales_of_[tensor.shard][tensor.index]];
  TensorCodec codec;
  codec.from = SourceDtype::kE4M3;
  codec.to = Encoding::kBF16;
  codec.rows = shape[0];
  codec.cols = shape[1];
  codec.scale_dtype = scales.dtype;
  codec.block_rows = static_cast<uint32_t>(block_rows_);
  codec.block_cols = static_cast<uint32_t>(block_cols_);
  codec.scale_source = scales.shard;
  codec.scale_offset = scales.offset;
  return codec;
}

}  // namespace aprfs
