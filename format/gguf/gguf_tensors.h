#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf/gguf_arch.h"
#include "format/gguf/gguf_container.h"
#include "format/model/shard_set.h"

namespace aprfs {

// The --outtype choices of convert_hf_to_gguf.py, and kQ4_K_M: llama-quantize's Q4_K_M of the
// F16 file (gguf_quantize.h).
enum class GgufOuttype { kAuto, kF32, kF16, kBF16, kQ8_0, kQ4_K_M };

// What the converter would write for the model's tensors (gguf-view.md §3): names mapped,
// dropped or refused, shapes in ggml order, the output type of each tensor, the LLaMA Q/K row
// permutation as row gathers, llama3's rope_freqs generated, in the converter's order.
struct GgufTensors {
  std::vector<GgufTensor> tensors;
  std::vector<TensorCodec> codecs;
  GgufOuttype outtype = GgufOuttype::kAuto;  // resolved: never kAuto
  uint32_t file_type = 0;                    // LlamaFileType
  uint64_t total_params = 0;
  uint64_t token_rows = 0;  // token_embd's ne1: the vocabulary the loader expects
};

// Source i of the extents is set.shards[i]. Throws FormatError naming the shard, the tensor and
// the rule where the converter would fail (a name it cannot map, a dtype it cannot read) or
// llama.cpp would refuse the file (a head count that does not divide the rows...).
GgufTensors PlanGgufTensors(const ShardSet& set, const GgufConfig& config, GgufOuttype outtype);

// The HF name's GGUF name; nullopt for tensors the converter drops; throws FormatError for one
// it cannot map.
std::optional<std::string> GgufTensorName(const GgufConfig& config, const std::string& hf_name);

// Source row of output row `row` under the LLaMA Q/K permutation of `heads` heads of `rows`
// rows in all (§3.3a).
uint64_t LlamaPermutedRow(uint64_t row, uint64_t rows, uint64_t heads);

}  // namespace aprfs
