#pragma once

#include "format/gguf/gguf_arch.h"
#include "format/gguf/gguf_tensors.h"

namespace aprfs {

// What `llama-quantize F16.gguf out.gguf Q4_K_M` makes of the converter's F16 file, without an
// importance matrix (gguf-view.md §5.6, as llama.cpp's llama-quant.cpp decides it in the build
// node-llama-cpp 3.22.1 ships): the tensors sorted by layer then name (generated ones first),
// each quantizable one
// given its type (Q4_K; Q6_K for output.weight, a tied token_embd.weight, and the attn_v and
// ffn_down of the layers use_more_bits picks; Q5_K for a 70B model's other attn_v; block-size
// fallbacks Q4_K -> Q5_0, Q6_K -> Q8_0, then F16), its pieces re-encoded from the same source
// values rounded to f16. `tensors` must be the F16 plan; file_type becomes 15.
void QuantizeQ4_K_M(const GgufConfig& config, GgufTensors& tensors);

// Sets general.quantization_version and general.file_type again, as llama-quantize does: they
// move to the end of the KVs.
void ResetQuantizeKeys(uint32_t file_type, GgufMetadata& kv);

}  // namespace aprfs
