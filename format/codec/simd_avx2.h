#pragma once

// 8-lane AVX2 helpers shared by kernels_avx2.cc and kernels_avx512.cc: the Rust f32
// primitives (§4.2) on vectors, lane plumbing, and the per-block header arithmetic (one lane per
// sub-block), which is the same whatever the width of the per-element work.
// Internal linkage (static) and the AVX2 target attribute: included only by those two files,
// never by baseline code, so no out-of-line copy with AVX2 instructions can be picked by the
// linker for a baseline caller.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "format/codec/block_layout.h"
#include "format/codec/half.h"
#include "format/codec/rust_numeric.h"

// No "fma" in the target: the compiler cannot contract a multiply and an add even if asked to.
#define APRFS_AVX2 __attribute__((target("avx2,f16c")))

namespace aprfs::codec::avx2 {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- Rust semantics on 8 lanes -------------------------------------------------------------
// _mm256_max_ps(a, b) is `a > b ? a : b` and _mm256_min_ps(a, b) is `a < b ? a : b`: both
// return b when either is NaN. With the running accumulator as b, a NaN element is ignored,
// which is what the fmax/fmin folds do. Folding in another order gives the same value; only
// the sign of an equal ±0 pair may differ, which never reaches an output byte (§4.2).
// Rounding: c - trunc(c) is exact (the fraction of a float is a float), so comparing it with
// ±0.5 decides ties exactly, and there is no rounding mode to depend on.

APRFS_AVX2 static inline __m256 Abs(__m256 v) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF)));
}

APRFS_AVX2 static inline __m256 Negate(__m256 v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }

// `as u8` of clamp(round(y), 0, hi), hi integer: clamping first gives the same integer, and
// max_ps(y, 0) turns a NaN into 0 as `as u8` does. round = ties away from zero: truncate,
// then add 1 where the (exact) fraction is >= 0.5.
APRFS_AVX2 static inline __m256i RoundClampUnsigned(__m256 y, __m256 hi) {
  const __m256 c = _mm256_min_ps(_mm256_max_ps(y, _mm256_setzero_ps()), hi);
  const __m256i t = _mm256_cvttps_epi32(c);
  const __m256 frac = _mm256_sub_ps(c, _mm256_cvtepi32_ps(t));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);  // all ones = -1
  return _mm256_sub_epi32(t, _mm256_castps_si256(up));
}

// `as i8` of clamp(round(y), lo, hi), lo <= 0 <= hi integers; NaN -> 0.
APRFS_AVX2 static inline __m256i RoundClampSigned(__m256 y, __m256 lo, __m256 hi) {
  const __m256 ordered = _mm256_cmp_ps(y, y, _CMP_ORD_Q);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
  __m256i t = _mm256_cvttps_epi32(c);
  const __m256 frac = _mm256_sub_ps(c, _mm256_cvtepi32_ps(t));
  t = _mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ)));
  t = _mm256_add_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(frac, _mm256_set1_ps(-0.5f), _CMP_LE_OQ)));
  return _mm256_and_si256(t, _mm256_castps_si256(ordered));
}

// ---- Lane plumbing ---------------------------------------------------------------------------

template <bool kMax>
APRFS_AVX2 static inline __m256 MinOrMax(__m256 a, __m256 b) {
  return kMax ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b);
}

// Lane j of the result = min or max of the 8 lanes of p[j] (p holds no NaN).
template <bool kMax>
APRFS_AVX2 static inline __m256 ReduceEight(const __m256 p[8]) {
  __m256 a[4];  // low half: p[2k] folded to 4 lanes, high half: p[2k+1]
  for (int k = 0; k < 4; ++k) {
    a[k] = MinOrMax<kMax>(_mm256_permute2f128_ps(p[2 * k], p[2 * k + 1], 0x20),
                          _mm256_permute2f128_ps(p[2 * k], p[2 * k + 1], 0x31));
  }
  // Per half, lanes [p0 p2 p0 p2] folded to 2 (b0), [p4 p6 p4 p6] (b1); high halves p1 p3 / p5 p7.
  const __m256 b0 = MinOrMax<kMax>(_mm256_unpacklo_ps(a[0], a[1]), _mm256_unpackhi_ps(a[0], a[1]));
  const __m256 b1 = MinOrMax<kMax>(_mm256_unpacklo_ps(a[2], a[3]), _mm256_unpackhi_ps(a[2], a[3]));
  // [p0 p2 p4 p6 | p1 p3 p5 p7], each fully folded.
  const __m256 c = MinOrMax<kMax>(_mm256_shuffle_ps(b0, b1, 0x44), _mm256_shuffle_ps(b0, b1, 0xEE));
  return _mm256_permutevar8x32_ps(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Max of the 8 lanes (no NaN lanes).
APRFS_AVX2 static inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 32 int32 lanes (values that fit in a byte, signed if kSigned) -> 32 bytes in order.
template <bool kSigned>
APRFS_AVX2 static inline void StoreBytes32(__m256i v0, __m256i v1, __m256i v2, __m256i v3, uint8_t* out) {
  const __m256i w01 = _mm256_packs_epi32(v0, v1);  // per 128-bit half: [v0 4, v1 4]
  const __m256i w23 = _mm256_packs_epi32(v2, v3);
  const __m256i b = kSigned ? _mm256_packs_epi16(w01, w23) : _mm256_packus_epi16(w01, w23);
  // dwords now hold v0[0..3] v1[0..3] v2[0..3] v3[0..3] v0[4..7] v1[4..7] ...
  const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
}

// ---- Block headers (lane j = sub-block / block j) ------------------------------------------

// What the per-element Q4_K work needs per sub-block: s = d * sc, o = dmin * m (with the
// unrounded d, dmin) and whether s > EPS (all ones) or not (0).
struct Q4kSubBlocks {
  alignas(32) float s[8];
  alignas(32) float o[8];
  alignas(32) int32_t valid[8];
};

// Q4_K (§5.4.2) from the sub-blocks' NaN-free minima `lo` and maxima `hi`: writes the 16-byte
// header (d, dmin, packed scales and mins) and fills `sub`.
APRFS_AVX2 static inline void Q4kHeader(__m256 lo, __m256 hi, uint8_t* out, Q4kSubBlocks& sub) {
  const __m256 floor = _mm256_set1_ps(kF16MinNormal);
  const __m256 range = _mm256_sub_ps(hi, lo);
  const __m256 sub_scale =
      _mm256_blendv_ps(floor, _mm256_div_ps(range, _mm256_set1_ps(15.0f)), _mm256_cmp_ps(range, floor, _CMP_GT_OQ));
  const __m256 sub_min = _mm256_max_ps(Negate(lo), _mm256_setzero_ps());
  const float max_scale = RustFmax(0.0f, HorizontalMax(sub_scale));  // no NaN lanes
  const float max_min = RustFmax(0.0f, HorizontalMax(sub_min));
  const float d = max_scale > kF16MinNormal ? max_scale / 63.0f : kF16MinNormal;
  const float dmin = max_min > kF16MinNormal ? max_min / 63.0f : kF16MinNormal;
  const __m256i sc = RoundClampUnsigned(_mm256_div_ps(sub_scale, _mm256_set1_ps(d)), _mm256_set1_ps(63.0f));
  const __m256i m = RoundClampUnsigned(_mm256_div_ps(sub_min, _mm256_set1_ps(dmin)), _mm256_set1_ps(63.0f));

  StoreLe16(out, F32ToF16(d));
  StoreLe16(out + 2, F32ToF16(dmin));
  alignas(32) int32_t sc32[8];
  alignas(32) int32_t m32[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(sc32), sc);
  _mm256_store_si256(reinterpret_cast<__m256i*>(m32), m);
  uint8_t sc8[8];
  uint8_t m8[8];
  for (int j = 0; j < 8; ++j) {
    sc8[j] = static_cast<uint8_t>(sc32[j]);
    m8[j] = static_cast<uint8_t>(m32[j]);
  }
  PackQ4kScales(sc8, m8, out + 4);

  const __m256 s = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sc));
  _mm256_store_ps(sub.s, s);
  _mm256_store_ps(sub.o, _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(m)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(sub.valid),
                     _mm256_castps_si256(_mm256_cmp_ps(s, _mm256_set1_ps(kEps), _CMP_GT_OQ)));
}

// Q6_K (§5.5) from the 16 sub-blocks' max |x| (sub-blocks 0..7 in ma_lo, 8..15 in ma_hi):
// writes the 16 scales and d, and the multiplier of each sub-block (1/s, or 0 where |s| <= EPS).
APRFS_AVX2 static inline void Q6kScales(__m256 ma_lo, __m256 ma_hi, uint8_t* out, float inv[16]) {
  const __m256 floor = _mm256_set1_ps(kF16MinNormal);
  __m256 sub_scale[2];
  const __m256 ma[2] = {ma_lo, ma_hi};
  for (int h = 0; h < 2; ++h) {
    sub_scale[h] =
        _mm256_blendv_ps(floor, _mm256_div_ps(ma[h], _mm256_set1_ps(31.0f)), _mm256_cmp_ps(ma[h], floor, _CMP_GT_OQ));
  }
  const float max_scale = RustFmax(0.0f, HorizontalMax(_mm256_max_ps(sub_scale[0], sub_scale[1])));
  const float d = max_scale > kF16MinNormal ? max_scale / 127.0f : kF16MinNormal;
  for (int h = 0; h < 2; ++h) {
    const __m256i sc = RoundClampSigned(_mm256_div_ps(sub_scale[h], _mm256_set1_ps(d)), _mm256_set1_ps(-127.0f),
                                        _mm256_set1_ps(127.0f));
    const __m128i sc16 = _mm_packs_epi32(_mm256_castsi256_si128(sc), _mm256_extracti128_si256(sc, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 192 + 8 * h), _mm_packs_epi16(sc16, sc16));
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sc));
    const __m256 big = _mm256_cmp_ps(Abs(s), _mm256_set1_ps(kEps), _CMP_GT_OQ);
    _mm256_storeu_ps(inv + 8 * h, _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), s), big));
  }
  StoreLe16(out + 208, F32ToF16(d));
}

// AprQ4 (§5.3) scales of 8 consecutive full blocks from their max |x|: writes each block's
// 2-byte f16 scale (blocks 18 bytes apart from `out`) and returns the f32 scales in `scale`.
APRFS_AVX2 static inline void AprQ4Scales(__m256 max_abs, uint8_t* out, float scale[8]) {
  const __m256 s = _mm256_blendv_ps(_mm256_div_ps(max_abs, _mm256_set1_ps(7.0f)), _mm256_set1_ps(1.0f),
                                    _mm256_cmp_ps(max_abs, _mm256_setzero_ps(), _CMP_EQ_OQ));
  _mm256_storeu_ps(scale, s);
  // F16C's RNE conversion is bit-identical to F32ToF16 (§4.4, and the CodecHalf tests).
  alignas(16) uint16_t scale16[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(scale16), _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT));
  for (int b = 0; b < 8; ++b) StoreLe16(out + kAprQ4BlockBytes * b, scale16[b]);
}

}  // namespace aprfs::codec::avx2
