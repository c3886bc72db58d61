#pragma once

// The reference encoders: plain scalar code that follows the pseudo-code of
// apr-quantization.md §5 line by line (binary32 arithmetic, one rounding per operation, in the
// order written; this target is compiled with -ffp-contract=off). The SIMD kernels
// (kernels.h) must produce exactly these bytes for every input.

#include <cstddef>
#include <cstdint>

namespace aprfs::codec {

// One Q4_K super-block (§5.4.2): 256 f32 in, 144 bytes out.
void EncodeQ4kBlockRef(const float* x, uint8_t* out);

// One Q6_K super-block (§5.5): 256 f32 in, 210 bytes out.
void EncodeQ6kBlockRef(const float* x, uint8_t* out);

// One AprQ4 block (§5.3) of n = 1..32 elements: 18 bytes out (unused nibbles 0).
void EncodeAprQ4BlockRef(const float* x, size_t n, uint8_t* out);
// n elements as ceil(n/32) AprQ4 blocks, the last one short.
void EncodeAprQ4Ref(const float* x, size_t n, uint8_t* out);

// fold(acc, fmax, |x_i|): NaN elements are ignored (§5.2 starts from acc = 0).
float MaxAbsRef(const float* x, size_t n, float acc);

// The AprQ8 scale of a tensor whose max_abs is given (§5.2).
float AprQ8Scale(float max_abs);

// AprQ8 codes (§5.2): one i8 per element. The 4-byte scale header is the caller's.
void EncodeAprQ8Ref(const float* x, size_t n, float scale, uint8_t* out);

// F16 (§5.1): 2n bytes, little-endian.
void EncodeF16Ref(const float* x, size_t n, uint8_t* out);

// Sources to f32 (§3.1): n little-endian 16-bit values.
void WidenBf16Ref(const uint8_t* src, size_t n, float* out);
void WidenF16Ref(const uint8_t* src, size_t n, float* out);

// FP8 E4M3 times its block's scale_inv, rounded to bf16 (§9.4). A NaN byte gives its own NaN
// whatever the scale: when both factors are NaN, which NaN x86 returns depends on the operand
// order, which the compiler is free to swap.
uint16_t E4m3ScaledToBf16(uint8_t b, float scale);
void E4m3ScaledToBf16Ref(const uint8_t* src, size_t n, float scale, uint16_t* out);

}  // namespace aprfs::codec
