#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/codec/kernels.h"

namespace aprfs {

// How the bytes of a computed tensor are made from its source bytes: the description a plan
// keeps for each computed extent (a "codec"), and the arithmetic that maps output bytes to the
// source elements they need. Encoders are block-local: output is an optional header (AprQ8's
// tensor-wide scale) followed by units, each computed from a contiguous run of source elements
// (apr-quantization.md §5).

enum class SourceDtype : uint8_t { kF32, kF16, kBF16, kE4M3 };
// kGgml*: ggml's reference quantizers (GGUF views, ggml_quants.h); the others are what
// aprender writes (its kQ4K has ggml's layout but its own encoder).
enum class Encoding : uint8_t {
  kF32, kF16, kBF16, kQ4K, kAprQ8, kAprQ4, kGgmlQ8_0, kGgmlQ5_0, kGgmlQ4K, kGgmlQ5K, kGgmlQ6K
};
// The dtype of an FP8 weight's `weight_scale_inv`: f32 multipliers, or one-byte powers of two
// (the "ue8m0" variant: s = 2^(byte - 127)).
enum class ScaleDtype : uint8_t { kF32, kE8M0 };

struct TensorCodec {
  SourceDtype from = SourceDtype::kF32;
  Encoding to = Encoding::kF32;
  // Q4_K of a 2-D tensor: every row is padded with zeros to whole super-blocks (§5.4.3).
  bool row_padded = false;
  // ggml encodings: values are rounded to f16 first, as llama-quantize reads them from the
  // converter's F16 file.
  bool round_to_f16 = false;
  // F32 output of 1 + the value (Gemma's norms, which the model applies as 1 + w).
  bool add_one = false;
  // The source as a row-major matrix: its 2-D shape, or 1 x N for other ranks.
  uint64_t rows = 1;
  uint64_t cols = 0;
  // FP8 (kE4M3) sources: where the scale tensor [ceil(rows/block_rows), ceil(cols/block_cols)]
  // lives (a source of the plan and a byte offset in it), and its block size (§9.2).
  ScaleDtype scale_dtype = ScaleDtype::kF32;
  uint32_t block_rows = 0;
  uint32_t block_cols = 0;
  uint32_t scale_source = 0;
  uint64_t scale_offset = 0;

  uint64_t elements() const { return rows * cols; }
};

// Bytes per source element, and per output unit; elements per unit; the header's size.
uint64_t SourceElementBytes(SourceDtype dtype);
uint64_t UnitBytes(Encoding encoding);
uint64_t UnitElements(Encoding encoding);
uint64_t HeaderBytes(const TensorCodec& codec);
uint64_t UnitCount(const TensorCodec& codec);
// The encoded tensor's size: header + units (0 for an empty tensor).
uint64_t EncodedSize(const TensorCodec& codec);

// A run of source elements [first, first + count).
struct ElementRange {
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t end() const { return first + count; }
};
// The source elements unit `unit` is made from (fewer than UnitElements at the end of a row
// or of the tensor: the encoder pads them with zeros).
ElementRange UnitSource(const TensorCodec& codec, uint64_t unit);
// The elements units [first_unit, end_unit) are made from: one contiguous run.
ElementRange UnitsSource(const TensorCodec& codec, uint64_t first_unit, uint64_t end_unit);
// The units whose bytes overlap output bytes [begin, end) (offsets within the tensor).
struct UnitSpan {
  uint64_t first = 0;
  uint64_t end = 0;
};
UnitSpan UnitsCovering(const TensorCodec& codec, uint64_t begin, uint64_t end);
// Output offset of unit `unit` (the header comes first).
uint64_t UnitOffset(const TensorCodec& codec, uint64_t unit);

// FP8 sources: the byte range of the scale tensor that elements `range` need (whole rows of
// scales), relative to scale_offset.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};
ByteRange ScaleBytesFor(const TensorCodec& codec, const ElementRange& range);

// Source bytes of `range` -> f32 values, exactly as aprender widens them (§3.1); FP8 through
// BF16 per §9.4/§9.5. `scales` are the bytes ScaleBytesFor(range) names.
void DecodeElements(const TensorCodec& codec, const codec::CodecKernels& kernels,
                    const ElementRange& range, const uint8_t* source, const uint8_t* scales,
                    float* out);

// Encodes units [first_unit, end_unit) from `values`, the f32 elements of
// UnitsSource(first_unit, end_unit), into `out` (UnitOffset(end) - UnitOffset(first) bytes).
// `q8_scale` is AprQ8's tensor-wide scale (AprQ8Scale of the tensor's max |x|); `scratch` is
// reused between calls.
void EncodeUnits(const TensorCodec& codec, const codec::CodecKernels& kernels, uint64_t first_unit,
                 uint64_t end_unit, const float* values, float q8_scale,
                 std::vector<float>& scratch, uint8_t* out);
// AprQ8's 4-byte header.
void EncodeHeader(const TensorCodec& codec, float q8_scale, uint8_t* out);

// "q4k", "bf16"...: for logs and errors.
std::string EncodingName(Encoding encoding);
std::string SourceDtypeName(SourceDtype dtype);

}  // namespace aprfs
