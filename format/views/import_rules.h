#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "format/codec/tensor_codec.h"
#include "format/views/view_kind.h"

namespace aprfs {

// aprender's two import paths (apr-quantization.md §2): "H", the streaming sharded import of a
// model with model.safetensors.index.json, and "S", the in-memory import of one
// model.safetensors. They differ in data order, passthrough, the tied head, metadata and
// value checks.
enum class ImportPath : uint8_t { kSharded, kSingleFile };

// §3.2, the newest predicate: norms, biases, tensors under 1024 elements and the GDN keep-list
// stay F32 under int8/int4/q4k. Applied to the tensor's (mapped) name.
bool SkipsQuantization(std::string_view name, uint64_t elements);

// Names aprender treats as an existing output head, and as the embedding a head is tied to.
bool IsOutputHead(std::string_view name);  // "lm_head.weight" or "output.weight"
bool IsTokenEmbedding(std::string_view name);

// What one tensor becomes in a quantized view (§3.3): its APR dtype code and either its source
// bytes unchanged (`encoding` empty) or an encoding of its f32 values.
struct TensorDispatch {
  uint8_t dtype = 0;
  std::optional<Encoding> encoding;
};
// `from` is the tensor's source dtype after FP8 dequantization (BF16 then).
TensorDispatch Dispatch(ViewKind view, ImportPath path, SourceDtype from, std::string_view name,
                        uint64_t elements);

}  // namespace aprfs
