#pragma once

// The ggml block quantizers llama.cpp's converter and llama-quantize use (without an importance
// matrix): plain scalar code following quantize_row_*_ref of ggml-quants.c, operation for
// operation in binary32 (this target is compiled with -ffp-contract=off), so the bytes equal
// ggml's for every input (gguf-view.md §5). Each function encodes one block.

#include <cstddef>
#include <cstdint>

namespace aprfs::codec {

inline constexpr size_t kGgmlQ8_0Bytes = 34;   // 32 elements
inline constexpr size_t kGgmlQ5_0Bytes = 22;   // 32 elements
inline constexpr size_t kGgmlQ4KBytes = 144;   // 256 elements
inline constexpr size_t kGgmlQ5KBytes = 176;   // 256 elements
inline constexpr size_t kGgmlQ6KBytes = 210;   // 256 elements

// ggml's f32 -> f16 (GGML_FP32_TO_FP16): round to nearest even; a NaN becomes 0x7E00 with its
// sign.
uint16_t GgmlFp16(float x);

// Q8_0 (§5.1): d = max|x| / 127, q = roundf(x / d).
void EncodeGgmlQ8_0BlockRef(const float* x, uint8_t* out);
// Q5_0: d = the element of largest |x| / -16, q = min(31, (int8)(x/d + 16.5)), low nibbles then
// the 32 fifth bits.
void EncodeGgmlQ5_0BlockRef(const float* x, uint8_t* out);
// Q4_K (§5.3): make_qkx2_quants per 32-element sub-block, 6-bit scales and mins.
void EncodeGgmlQ4KBlockRef(const float* x, uint8_t* out);
// Q5_K: as Q4_K with 5-bit levels (make_qkx2_quants with nmax 31, rmin -0.5, 15 steps); d,
// dmin, scales, then the 32 bytes of fifth bits before the nibbles.
void EncodeGgmlQ5KBlockRef(const float* x, uint8_t* out);
// Q6_K (§5.4): make_qx_quants per 16-element group, int8 scales, d last.
void EncodeGgmlQ6KBlockRef(const float* x, uint8_t* out);

// The costly part of the K-quants, split out so that SIMD kernels can replace it: the fit of
// every sub-block (Q4_K/Q5_K: make_qkx2_quants of the 8 sub-blocks of 32 with their weights,
// scales, negated mins and levels; Q6_K: make_qx_quants of the 16 groups of 16, scales and
// levels + 32). The rest of a block (scales of the scales, requantization, packing) is the
// block encoder's, the same for every fit.
using KQuantFit = void (*)(const float* x, int nmax, float rmin, int nstep, float scales[8],
                           float neg_mins[8], uint8_t L[256]);
using Q6KFit = void (*)(const float* x, float scales[16], int8_t L[256]);
void FitKQuantRef(const float* x, int nmax, float rmin, int nstep, float scales[8],
                  float neg_mins[8], uint8_t L[256]);
void FitQ6KRef(const float* x, float scales[16], int8_t L[256]);
void EncodeGgmlQ4KBlock(KQuantFit fit, const float* x, uint8_t* out);
void EncodeGgmlQ5KBlock(KQuantFit fit, const float* x, uint8_t* out);
void EncodeGgmlQ6KBlock(Q6KFit fit, const float* x, uint8_t* out);

}  // namespace aprfs::codec
