// ggml's quantizers (ggml_quants.h) on AVX2. Q8_0: one block of 32 in four vectors. The K-quant
// fits, one lane per sub-block: lane j runs sub-block j's
// loops element after element, with the reference's operations in the reference's order (IEEE
// division and square root, no FMA: "fma" is not in the target; comparisons that are false for
// NaN where the reference's `<`/`>` are), so every lane computes exactly the reference's bits.
// The branches of the reference become masks: a lane takes a candidate only where the scalar
// code would have. 8 lanes = the 8 sub-blocks of a Q4_K/Q5_K block, or 8 of Q6_K's 16 groups.
#include <immintrin.h>

#include <cmath>

#include "format/codec/block_layout.h"
#include "format/codec/ggml_quants.h"
#include "format/codec/kernels_isa.h"
#include "format/codec/simd_avx2.h"

namespace aprfs::codec {
namespace {

using namespace avx2;

// ggml's nearest_int on 8 lanes: the same float add and bit arithmetic.
APRFS_AVX2 inline __m256i NearestInt8(__m256 v) {
  const __m256 biased = _mm256_add_ps(v, _mm256_set1_ps(12582912.0f));
  return _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(biased), _mm256_set1_epi32(0x007fffff)),
                          _mm256_set1_epi32(0x00400000));
}

APRFS_AVX2 inline __m256i Clamp8(__m256i v, int lo, int hi) {
  return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

APRFS_AVX2 inline __m256 Blend(__m256 keep, __m256 take, __m256 mask) {
  return _mm256_blendv_ps(keep, take, mask);
}

APRFS_AVX2 inline __m256 Square(__m256 v) { return _mm256_mul_ps(v, v); }

// xt[i] lane j = x[stride * j + i]: element i of every lane's run.
APRFS_AVX2 inline void Transpose(const float* x, int stride, int n, __m256* xt) {
  const __m256i index = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32(stride));
  for (int i = 0; i < n; ++i) xt[i] = _mm256_i32gather_ps(x + i, index, 4);
}

APRFS_AVX2 void FitKQuant(const float* x, int nmax, float rmin, int nstep, float scales[8],
                          float neg_mins[8], uint8_t L[256]) {
  __m256 xt[32], w[32];
  Transpose(x, 32, 32, xt);
  __m256 sum_x2 = _mm256_setzero_ps();
  for (int i = 0; i < 32; ++i) sum_x2 = _mm256_add_ps(sum_x2, Square(xt[i]));
  const __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32.0f)));
  for (int i = 0; i < 32; ++i) w[i] = _mm256_add_ps(av_x, Abs(xt[i]));

  // make_qkx2_quants, every lane at once.
  __m256 min = xt[0], max = xt[0];
  __m256 sum_w = w[0];
  __m256 sum_x = _mm256_mul_ps(sum_w, xt[0]);
  for (int i = 1; i < 32; ++i) {
    min = Blend(min, xt[i], _mm256_cmp_ps(xt[i], min, _CMP_LT_OQ));
    max = Blend(max, xt[i], _mm256_cmp_ps(xt[i], max, _CMP_GT_OQ));
    sum_w = _mm256_add_ps(sum_w, w[i]);
    sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(w[i], xt[i]));
  }
  const __m256 zero = _mm256_setzero_ps();
  min = Blend(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));
  const __m256 first_min = min;                              // a flat lane's answer
  const __m256 flat = _mm256_cmp_ps(max, min, _CMP_EQ_OQ);  // all levels 0, scale 0
  const __m256 fnmax = _mm256_set1_ps(static_cast<float>(nmax));
  __m256 iscale = _mm256_div_ps(fnmax, _mm256_sub_ps(max, min));
  __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
  __m256i level[32];
  __m256 best_error = zero;
  for (int i = 0; i < 32; ++i) {
    level[i] = Clamp8(NearestInt8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
    const __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(level[i])), min), xt[i]);
    best_error = _mm256_add_ps(best_error, _mm256_mul_ps(w[i], Square(diff)));
  }
  for (int is = 0; is <= nstep; ++is) {
    // max - min again: a better candidate moves min.
    const float numerator = rmin + 0.1f * static_cast<float>(is) + static_cast<float>(nmax);
    iscale = _mm256_div_ps(_mm256_set1_ps(numerator), _mm256_sub_ps(max, min));
    __m256i aux[32];
    __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    for (int i = 0; i < 32; ++i) {
      aux[i] = Clamp8(NearestInt8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
      const __m256 l = _mm256_cvtepi32_ps(aux[i]);
      const __m256 wl = _mm256_mul_ps(w[i], l);
      sum_l = _mm256_add_ps(sum_l, wl);
      sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
      sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xt[i]));
    }
    const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
    const __m256 usable = _mm256_cmp_ps(D, zero, _CMP_GT_OQ);
    __m256 this_scale = _mm256_div_ps(
        _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
    __m256 this_min = _mm256_div_ps(
        _mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
    const __m256 positive_min = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
    this_min = Blend(this_min, zero, positive_min);
    this_scale = Blend(this_scale, _mm256_div_ps(sum_xl, sum_l2), positive_min);
    __m256 error = zero;
    for (int i = 0; i < 32; ++i) {
      const __m256 diff = _mm256_sub_ps(
          _mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(aux[i])), this_min), xt[i]);
      error = _mm256_add_ps(error, _mm256_mul_ps(w[i], Square(diff)));
    }
    const __m256 better = _mm256_and_ps(usable, _mm256_cmp_ps(error, best_error, _CMP_LT_OQ));
    if (_mm256_movemask_ps(better) == 0) continue;
    const __m256i take = _mm256_castps_si256(better);
    for (int i = 0; i < 32; ++i) level[i] = _mm256_blendv_epi8(level[i], aux[i], take);
    best_error = Blend(best_error, error, better);
    scale = Blend(scale, this_scale, better);
    min = Blend(min, this_min, better);
  }
  scale = Blend(scale, zero, flat);
  min = Blend(min, first_min, flat);
  const __m256i flat_lanes = _mm256_castps_si256(flat);
  alignas(32) int32_t lanes[8];
  for (int i = 0; i < 32; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_andnot_si256(flat_lanes, level[i]));
    for (int j = 0; j < 8; ++j) L[32 * j + i] = static_cast<uint8_t>(lanes[j]);
  }
  _mm256_storeu_ps(scales, scale);
  _mm256_storeu_ps(neg_mins, Negate(min));
}

// make_qx_quants (rmse_type 1) of 8 groups of 16 (group j at x + 16 * j).
APRFS_AVX2 void FitQxEight(const float* x, float* scales, int8_t* L) {
  constexpr int kNmax = 32;
  __m256 xt[16], w[16];
  Transpose(x, 16, 16, xt);
  const __m256 zero = _mm256_setzero_ps();
  __m256 max = zero, amax = zero;
  for (int i = 0; i < 16; ++i) {
    const __m256 a = Abs(xt[i]);
    const __m256 larger = _mm256_cmp_ps(a, amax, _CMP_GT_OQ);
    amax = Blend(amax, a, larger);
    max = Blend(max, xt[i], larger);
    w[i] = Square(xt[i]);
  }
  const __m256 silent = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);  // all zero
  auto levels = [&](__m256 iscale, __m256i* l) APRFS_AVX2 {
    for (int i = 0; i < 16; ++i) {
      l[i] = Clamp8(NearestInt8(_mm256_mul_ps(iscale, xt[i])), -kNmax, kNmax - 1);
    }
  };
  auto sums = [&](const __m256i* l, __m256& sumlx, __m256& suml2) APRFS_AVX2 {
    sumlx = suml2 = zero;
    for (int i = 0; i < 16; ++i) {
      const __m256 fl = _mm256_cvtepi32_ps(l[i]);
      sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w[i], xt[i]), fl));
      suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], fl), fl));
    }
  };
  __m256i level[16], aux[16];
  levels(_mm256_div_ps(_mm256_set1_ps(-static_cast<float>(kNmax)), max), level);
  __m256 sumlx, suml2;
  sums(level, sumlx, suml2);
  // `suml2 ? sumlx / suml2 : 0`: NaN counts as true.
  __m256 scale = Blend(zero, _mm256_div_ps(sumlx, suml2), _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ));
  __m256 best = _mm256_mul_ps(scale, sumlx);
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float numerator = -(static_cast<float>(kNmax) + 0.1f * static_cast<float>(is));
    levels(_mm256_div_ps(_mm256_set1_ps(numerator), max), aux);
    sums(aux, sumlx, suml2);
    const __m256 better = _mm256_and_ps(
        _mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
        _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ));
    if (_mm256_movemask_ps(better) == 0) continue;
    const __m256i take = _mm256_castps_si256(better);
    for (int i = 0; i < 16; ++i) level[i] = _mm256_blendv_epi8(level[i], aux[i], take);
    scale = Blend(scale, _mm256_div_ps(sumlx, suml2), better);
    best = Blend(best, _mm256_mul_ps(scale, sumlx), better);
  }
  scale = Blend(scale, zero, silent);
  const __m256i keep = _mm256_castps_si256(_mm256_xor_ps(silent, _mm256_castsi256_ps(_mm256_set1_epi32(-1))));
  alignas(32) int32_t lanes[8];
  for (int i = 0; i < 16; ++i) {
    // level + nmax, and 0 for an all-zero group (the reference's L = 0 there).
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_and_si256(keep, _mm256_add_epi32(level[i], _mm256_set1_epi32(kNmax))));
    for (int j = 0; j < 8; ++j) L[16 * j + i] = static_cast<int8_t>(lanes[j]);
  }
  _mm256_storeu_ps(scales, scale);
}

APRFS_AVX2 void FitQ6K(const float* x, float scales[16], int8_t L[256]) {
  FitQxEight(x, scales, L);
  FitQxEight(x + 128, scales + 8, L + 128);
}

// One Q8_0 block: max |x|, d = max / 127, q = round(x * (1 / d)) half away from zero. A block
// with a NaN, or whose x / d leave [-127.5, 127.5] (a subnormal d: 1 / d overflows), goes to the
// reference: ggml's running MAX lets a NaN through position-dependently, and C's float-to-int8
// conversion of an out-of-range value is the x86 one (low byte of 0x80000000).
APRFS_AVX2 void Q8_0Block(const float* x, uint8_t* out) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, Abs(v[k]));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan) != 0) return EncodeGgmlQ8_0BlockRef(x, out);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float m = 0.0f;
  for (float lane : lanes) m = m > lane ? m : lane;
  const float d = m / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  __m256 scaled[4];
  __m256 inside = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int k = 0; k < 4; ++k) {
    scaled[k] = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
    inside = _mm256_and_ps(inside, _mm256_cmp_ps(Abs(scaled[k]), _mm256_set1_ps(127.5f), _CMP_LE_OQ));
  }
  if (_mm256_movemask_ps(inside) != 0xFF) return EncodeGgmlQ8_0BlockRef(x, out);
  StoreLe16(out, GgmlFp16(d));
  alignas(32) int32_t q[32];
  for (int k = 0; k < 4; ++k) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * k),
                       RoundClampSigned(scaled[k], _mm256_set1_ps(-128.0f), _mm256_set1_ps(127.0f)));
  }
  for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(q[j]);
}

}  // namespace

void GgmlQ8_0BlocksAvx2(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) Q8_0Block(x + 32 * b, out + kGgmlQ8_0Bytes * b);
}

void GgmlQ4KBlocksAvx2(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) EncodeGgmlQ4KBlock(FitKQuant, x + 256 * b, out + kGgmlQ4KBytes * b);
}
void GgmlQ5KBlocksAvx2(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) EncodeGgmlQ5KBlock(FitKQuant, x + 256 * b, out + kGgmlQ5KBytes * b);
}
void GgmlQ6KBlocksAvx2(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) EncodeGgmlQ6KBlock(FitQ6K, x + 256 * b, out + kGgmlQ6KBytes * b);
}

}  // namespace aprfs::codec
