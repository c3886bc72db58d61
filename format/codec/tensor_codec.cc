#include "format/codec/tensor_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/codec/ggml_quants.h"
#include "format/codec/half.h"
#include "format/codec/reference.h"

namespace aprfs {
namespace {

constexpr uint64_t kQ4kElements = 256;
constexpr uint64_t kQ4kBytes = 144;
constexpr uint64_t kAprQ4Elements = 32;
constexpr uint64_t kAprQ4Bytes = 18;

// ggml's block quantizers: elements and bytes of a block, and the encoder of `blocks` blocks
// (the kernels' for the costly K-quants; null for other encodings).
using BlocksEncoder = void (*)(const float* x, size_t blocks, uint8_t* out);
template <void (*kEncode)(const float*, uint8_t*), size_t kElements, size_t kBytes>
void EachBlock(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) kEncode(x + b * kElements, out + b * kBytes);
}
struct GgmlBlockCodec {
  uint64_t elements;
  uint64_t bytes;
  BlocksEncoder encode;
};
GgmlBlockCodec GgmlBlock(Encoding encoding, const codec::CodecKernels* kernels = nullptr) {
  using namespace codec;
  switch (encoding) {
    case Encoding::kGgmlQ8_0: return {32, kGgmlQ8_0Bytes, kernels ? kernels->ggml_q8_0_blocks : nullptr};
    case Encoding::kGgmlQ5_0: return {32, kGgmlQ5_0Bytes, EachBlock<EncodeGgmlQ5_0BlockRef, 32, kGgmlQ5_0Bytes>};
    case Encoding::kGgmlQ4K: return {256, kGgmlQ4KBytes, kernels ? kernels->ggml_q4k_blocks : nullptr};
    case Encoding::kGgmlQ5K: return {256, kGgmlQ5KBytes, kernels ? kernels->ggml_q5k_blocks : nullptr};
    case Encoding::kGgmlQ6K: return {256, kGgmlQ6KBytes, kernels ? kernels->ggml_q6k_blocks : nullptr};
    default: return {1, 0, nullptr};
  }
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint64_t UnitsPerRow(const TensorCodec& codec) { return CeilDiv(codec.cols, kQ4kElements); }

// The per-element scale of an FP8 weight (§9.4): the f32 multiplier of its block.
float ScaleAt(const TensorCodec& codec, const uint8_t* scale_rows, uint64_t first_block_row,
              uint64_t row, uint64_t col) {
  const uint64_t block_cols = CeilDiv(codec.cols, codec.block_cols);
  const uint64_t index = (row / codec.block_rows - first_block_row) * block_cols +
                         col / codec.block_cols;
  if (codec.scale_dtype == ScaleDtype::kE8M0) {
    return std::ldexp(1.0f, static_cast<int>(scale_rows[index]) - 127);
  }
  float scale;
  std::memcpy(&scale, scale_rows + 4 * index, 4);
  return scale;
}

}  // namespace

uint64_t SourceElementBytes(SourceDtype dtype) {
  switch (dtype) {
    case SourceDtype::kF32: return 4;
    case SourceDtype::kF16:
    case SourceDtype::kBF16: return 2;
    case SourceDtype::kE4M3: return 1;
  }
  return 0;
}

uint64_t UnitBytes(Encoding encoding) {
  switch (encoding) {
    case Encoding::kF32: return 4;
    case Encoding::kF16:
    case Encoding::kBF16: return 2;
    case Encoding::kQ4K: return kQ4kBytes;
    case Encoding::kAprQ8: return 1;
    case Encoding::kAprQ4: return kAprQ4Bytes;
    case Encoding::kGgmlQ8_0:
    case Encoding::kGgmlQ5_0:
    case Encoding::kGgmlQ4K:
    case Encoding::kGgmlQ5K:
    case Encoding::kGgmlQ6K: return GgmlBlock(encoding).bytes;
  }
  return 0;
}

uint64_t UnitElements(Encoding encoding) {
  switch (encoding) {
    case Encoding::kQ4K: return kQ4kElements;
    case Encoding::kAprQ4: return kAprQ4Elements;
    default: return GgmlBlock(encoding).elements;
  }
}

uint64_t HeaderBytes(const TensorCodec& codec) {
  return codec.to == Encoding::kAprQ8 && codec.elements() > 0 ? 4 : 0;
}

uint64_t UnitCount(const TensorCodec& codec) {
  if (codec.row_padded) return codec.rows * UnitsPerRow(codec);
  return CeilDiv(codec.elements(), UnitElements(codec.to));
}

uint64_t EncodedSize(const TensorCodec& codec) {
  return HeaderBytes(codec) + UnitCount(codec) * UnitBytes(codec.to);
}

ElementRange UnitSource(const TensorCodec& codec, uint64_t unit) {
  const uint64_t per_unit = UnitElements(codec.to);
  if (codec.row_padded) {
    const uint64_t per_row = UnitsPerRow(codec);
    const uint64_t row = unit / per_row;
    const uint64_t col = (unit % per_row) * per_unit;
    return {row * codec.cols + col, std::min(per_unit, codec.cols - col)};
  }
  const uint64_t first = unit * per_unit;
  return {first, std::min(per_unit, codec.elements() - first)};
}

ElementRange UnitsSource(const TensorCodec& codec, uint64_t first_unit, uint64_t end_unit) {
  if (first_unit >= end_unit) return {UnitSource(codec, first_unit).first, 0};
  const uint64_t first = UnitSource(codec, first_unit).first;
  return {first, UnitSource(codec, end_unit - 1).end() - first};
}

UnitSpan UnitsCovering(const TensorCodec& codec, uint64_t begin, uint64_t end) {
  const uint64_t header = HeaderBytes(codec);
  const uint64_t unit_bytes = UnitBytes(codec.to);
  const uint64_t units = UnitCount(codec);
  auto unit_at = [&](uint64_t offset) { return offset <= header ? 0 : (offset - header) / unit_bytes; };
  if (end <= header) return {0, 0};
  return {unit_at(begin), std::min(units, CeilDiv(end - header, unit_bytes))};
}

uint64_t UnitOffset(const TensorCodec& codec, uint64_t unit) {
  return HeaderBytes(codec) + unit * UnitBytes(codec.to);
}

ByteRange ScaleBytesFor(const TensorCodec& codec, const ElementRange& range) {
  if (codec.from != SourceDtype::kE4M3 || range.count == 0) return {};
  const uint64_t scale_bytes = codec.scale_dtype == ScaleDtype::kF32 ? 4 : 1;
  const uint64_t row_bytes = CeilDiv(codec.cols, codec.block_cols) * scale_bytes;
  const uint64_t first_block_row = range.first / codec.cols / codec.block_rows;
  const uint64_t last_block_row = (range.end() - 1) / codec.cols / codec.block_rows;
  return {first_block_row * row_bytes, (last_block_row - first_block_row + 1) * row_bytes};
}

void DecodeElements(const TensorCodec& codec, const codec::CodecKernels& kernels,
                    const ElementRange& range, const uint8_t* source, const uint8_t* scales,
                    float* out) {
  switch (codec.from) {
    case SourceDtype::kF32:
      std::memcpy(out, source, range.count * 4);
      return;
    case SourceDtype::kF16:
      kernels.widen_f16(source, range.count, out);
      return;
    case SourceDtype::kBF16:
      kernels.widen_bf16(source, range.count, out);
      return;
    case SourceDtype::kE4M3:
      break;
  }
  // FP8: runs that share one scale (a row's stretch inside one block column) go through the
  // kernel to BF16, then widen exactly (§9.5: quantized views see the BF16 a converter writes).
  const uint64_t first_block_row = range.first / codec.cols / codec.block_rows;
  uint16_t bf16[256];
  uint64_t done = 0;
  while (done < range.count) {
    const uint64_t element = range.first + done;
    const uint64_t row = element / codec.cols;
    const uint64_t col = element % codec.cols;
    const uint64_t block_end = std::min<uint64_t>(codec.cols, (col / codec.block_cols + 1) * codec.block_cols);
    const uint64_t run = std::min<uint64_t>({block_end - col, range.count - done, 256});
    kernels.e4m3_scaled_to_bf16(source + done, run, ScaleAt(codec, scales, first_block_row, row, col),
                                bf16);
    kernels.widen_bf16(reinterpret_cast<const uint8_t*>(bf16), run, out + done);
    done += run;
  }
}

void EncodeHeader(const TensorCodec& codec, float q8_scale, uint8_t* out) {
  if (HeaderBytes(codec) == 4) std::memcpy(out, &q8_scale, 4);
}

void EncodeUnits(const TensorCodec& codec, const codec::CodecKernels& kernels, uint64_t first_unit,
                 uint64_t end_unit, const float* values, float q8_scale,
                 std::vector<float>& scratch, uint8_t* out) {
  const uint64_t units = end_unit - first_unit;
  if (units == 0) return;
  switch (codec.to) {
    case Encoding::kF32:
      if (codec.add_one) {
        for (uint64_t i = 0; i < units; ++i) {
          const float v = values[i] + 1.0f;
          std::memcpy(out + 4 * i, &v, 4);
        }
        return;
      }
      std::memcpy(out, values, units * 4);
      return;
    case Encoding::kF16:
      kernels.f16(values, units, out);
      return;
    case Encoding::kBF16:
      for (uint64_t i = 0; i < units; ++i) {
        const uint16_t bits = codec::F32ToBf16(values[i]);
        std::memcpy(out + 2 * i, &bits, 2);
      }
      return;
    case Encoding::kAprQ8:
      kernels.apr_q8(values, units, q8_scale, out);
      return;
    case Encoding::kAprQ4: {
      const ElementRange source = UnitsSource(codec, first_unit, end_unit);
      kernels.apr_q4(values, source.count, out);
      return;
    }
    case Encoding::kGgmlQ8_0:
    case Encoding::kGgmlQ5_0:
    case Encoding::kGgmlQ4K:
    case Encoding::kGgmlQ5K:
    case Encoding::kGgmlQ6K: {
      // Whole blocks (a GGUF row is whole blocks); a short last one of a flat tensor is padded.
      const GgmlBlockCodec block = GgmlBlock(codec.to, &kernels);
      const uint64_t first = UnitSource(codec, first_unit).first;
      // Whole blocks that need no rounding are encoded where they are (a piece is 1 x N, so its
      // blocks lie back to back); a short last block, or values to round, go through `x`.
      uint64_t whole = end_unit - first_unit;
      if (codec.round_to_f16) whole = 0;
      while (whole > 0 && UnitSource(codec, first_unit + whole - 1).count < block.elements) --whole;
      block.encode(values, whole, out);
      float x[256];
      for (uint64_t unit = first_unit + whole; unit < end_unit; ++unit) {
        const ElementRange source = UnitSource(codec, unit);
        std::fill(x, x + block.elements, 0.0f);
        std::memcpy(x, values + (source.first - first), source.count * sizeof(float));
        if (codec.round_to_f16) {
          for (uint64_t i = 0; i < source.count; ++i) x[i] = codec::F16ToF32(codec::GgmlFp16(x[i]));
        }
        block.encode(x, 1, out + (unit - first_unit) * block.bytes);
      }
      return;
    }
    case Encoding::kQ4K:
      break;
  }
  // Q4_K: whole super-blocks are encoded in place; the last one of a row (or of the tensor)
  // is copied into a zero-padded block first.
  const uint64_t first_element = UnitSource(codec, first_unit).first;
  uint64_t unit = first_unit;
  while (unit < end_unit) {
    // A run of full units that lie back to back in the source.
    uint64_t run = 0;
    while (unit + run < end_unit && UnitSource(codec, unit + run).count == kQ4kElements &&
           (run == 0 || UnitSource(codec, unit + run).first ==
                            UnitSource(codec, unit + run - 1).end())) {
      ++run;
    }
    uint8_t* dst = out + (unit - first_unit) * kQ4kBytes;
    if (run > 0) {
      kernels.q4k_blocks(values + (UnitSource(codec, unit).first - first_element), run, dst);
      unit += run;
      continue;
    }
    const ElementRange partial = UnitSource(codec, unit);
    scratch.assign(kQ4kElements, 0.0f);
    std::memcpy(scratch.data(), values + (partial.first - first_element), partial.count * 4);
    kernels.q4k_blocks(scratch.data(), 1, dst);
    ++unit;
  }
}

std::string EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kF32: return "f32";
    case Encoding::kF16: return "f16";
    case Encoding::kBF16: return "bf16";
    case Encoding::kQ4K: return "q4k";
    case Encoding::kAprQ8: return "int8";
    case Encoding::kAprQ4: return "int4";
    case Encoding::kGgmlQ8_0: return "q8_0";
    case Encoding::kGgmlQ5_0: return "q5_0";
    case Encoding::kGgmlQ4K: return "ggml-q4_k";
    case Encoding::kGgmlQ5K: return "q5_k";
    case Encoding::kGgmlQ6K: return "ggml-q6_k";
  }
  return "?";
}

std::string SourceDtypeName(SourceDtype dtype) {
  switch (dtype) {
    case SourceDtype::kF32: return "F32";
    case SourceDtype::kF16: return "F16";
    case SourceDtype::kBF16: return "BF16";
    case SourceDtype::kE4M3: return "F8_E4M3";
  }
  return "?";
}

}  // namespace aprfs
