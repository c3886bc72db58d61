#pragma once

// The bulk codec API the read path calls on thousands of blocks at a time, with one
// implementation per instruction set, chosen at run time. Every implementation gives exactly
// the bytes of the reference encoders (reference.h, ggml_quants.h) for every input, NaN and
// Inf included.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace aprfs::codec {

enum class Isa { kScalar, kAvx2, kAvx512 };

Isa BestIsa();  // the widest instruction set this CPU (and OS) supports
bool IsaAvailable(Isa isa);
std::string_view IsaName(Isa isa);  // "scalar", "avx2", "avx512"

struct CodecKernels {
  // Sources -> f32 (exact). n elements, src little-endian bytes.
  void (*widen_bf16)(const uint8_t* src, size_t n, float* out);
  void (*widen_f16)(const uint8_t* src, size_t n, float* out);
  // FP8 E4M3 times one f32 scale, rounded to bf16 (§9.4): out[i] = E4m3ScaledToBf16(src[i], scale)
  // = F32ToBf16(E4m3ToF32(src[i]) * scale), except that a NaN byte keeps its own NaN (reference.h).
  void (*e4m3_scaled_to_bf16)(const uint8_t* src, size_t n, float scale, uint16_t* out);
  // Encoders (f32 in):
  void (*q4k_blocks)(const float* x, size_t blocks, uint8_t* out);  // blocks*256 in, blocks*144 out
  void (*q6k_blocks)(const float* x, size_t blocks, uint8_t* out);  // 210 bytes per block
  // ggml's own quantizers (ggml_quants.h; GGUF views): Q8_0 (32 in, 34 bytes out), and the
  // K-quants (256 in; 144, 176 and 210 bytes out).
  void (*ggml_q8_0_blocks)(const float* x, size_t blocks, uint8_t* out);
  void (*ggml_q4k_blocks)(const float* x, size_t blocks, uint8_t* out);
  void (*ggml_q5k_blocks)(const float* x, size_t blocks, uint8_t* out);
  void (*ggml_q6k_blocks)(const float* x, size_t blocks, uint8_t* out);
  // ceil(n/32) blocks of 18 bytes; the last may encode fewer than 32 elements (unused nibbles 0).
  void (*apr_q4)(const float* x, size_t n, uint8_t* out);
  float (*max_abs)(const float* x, size_t n, float acc);   // fold(acc, fmax, |x_i|)
  void (*apr_q8)(const float* x, size_t n, float scale, uint8_t* out);  // n bytes
  void (*f16)(const float* x, size_t n, uint8_t* out);                   // 2n bytes
};

const CodecKernels& Kernels(Isa isa);  // isa must be available
const CodecKernels& BestKernels();

}  // namespace aprfs::codec
