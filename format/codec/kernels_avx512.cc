// The AVX-512 (F, BW, DQ, VL) kernels: the per-element work on 16 lanes with mask registers and
// the truncating down-converts (vpmovdb/vpmovdw/vpmovqb); the per-block header arithmetic is
// the AVX2 code of simd_avx2.h. Same operations as the reference in the same order (IEEE
// division, no FMA in the target), so the bytes are identical. Kernels that AVX-512 does not
// make faster (bench/README.md) are taken from the AVX2 table.
// GCC 12 warns about the _mm512_undefined_*() placeholders inside its own AVX-512 intrinsics
// (GCC bug 105593, fixed in 13): not our variables. Before the include: the pragma is matched
// against the warning's location, which is in the header.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "format/codec/block_layout.h"
#include "format/codec/kernels_isa.h"
#include "format/codec/reference.h"
#include "format/codec/simd_avx2.h"

#define APRFS_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")))

namespace aprfs::codec {
namespace {

using avx2::kInf;

// ---- Rust semantics on 16 lanes (see simd_avx2.h for the reasoning) --------------------------

// `as u8` of clamp(round(y), 0, hi): NaN -> 0 through max_ps(y, 0).
APRFS_AVX512 inline __m512i RoundClampUnsigned(__m512 y, __m512 hi) {
  const __m512 c = _mm512_min_ps(_mm512_max_ps(y, _mm512_setzero_ps()), hi);
  const __m512i t = _mm512_cvttps_epi32(c);
  const __m512 frac = _mm512_sub_ps(c, _mm512_cvtepi32_ps(t));
  return _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t, _mm512_set1_epi32(1));
}

// `as i8` of clamp(round(y), lo, hi), lo <= 0 <= hi; NaN -> 0.
APRFS_AVX512 inline __m512i RoundClampSigned(__m512 y, __m512 lo, __m512 hi) {
  const __mmask16 ordered = _mm512_cmp_ps_mask(y, y, _CMP_ORD_Q);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
  __m512i t = _mm512_cvttps_epi32(c);
  const __m512 frac = _mm512_sub_ps(c, _mm512_cvtepi32_ps(t));
  const __m512i one = _mm512_set1_epi32(1);
  t = _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t, one);
  t = _mm512_mask_sub_epi32(t, _mm512_cmp_ps_mask(frac, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), t, one);
  return _mm512_maskz_mov_epi32(ordered, t);
}

// Min or max of the two 256-bit halves: 16 lanes folded to 8, for the AVX2 reductions.
template <bool kMax>
APRFS_AVX512 inline __m256 FoldHalves(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return kMax ? _mm256_max_ps(lo, hi) : _mm256_min_ps(lo, hi);
}

APRFS_AVX512 inline void Store16Bytes(__m512i v, uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(v));
}

// ---- FP8 -> BF16 (§9.4) ------------------------------------------------------------------------

APRFS_AVX512 void E4m3ScaledToBf16(const uint8_t* src, size_t n, float scale, uint16_t* out) {
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    const __m512i em = _mm512_and_si512(w, _mm512_set1_epi32(0x7F));
    // E >= 1: E and M shifted into place, exponent rebiased 7 -> 127. E = 0: M * 2^-9.
    __m512i mag = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
    const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(0x1p-9f));
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8)), _mm512_castps_si512(subnormal));
    const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7F));
    mag = _mm512_mask_mov_epi32(mag, is_nan, _mm512_set1_epi32(0x7FC00000));
    const __m512 x = _mm512_castsi512_ps(
        _mm512_or_si512(mag, _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x80)), 24)));
    // A NaN byte keeps its own NaN whatever the scale (reference.h).
    const __m512i y = _mm512_castps_si512(_mm512_mask_mov_ps(_mm512_mul_ps(x, s), is_nan, x));
    // f32 -> bf16: RNE on the bits, or (bits >> 16) | 0x40 for NaN.
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(y, 16), _mm512_set1_epi32(1));
    __m512i bf16 = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(y, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __m512 yf = _mm512_castsi512_ps(y);
    bf16 = _mm512_mask_mov_epi32(bf16, _mm512_cmp_ps_mask(yf, yf, _CMP_UNORD_Q),
                                 _mm512_or_si512(_mm512_srli_epi32(y, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(bf16));
  }
  E4m3ScaledToBf16Ref(src + i, n - i, scale, out + i);
}

// ---- Q4_K (§5.4.2) ------------------------------------------------------------------------------

APRFS_AVX512 void Q4kBlock(const float* x, uint8_t* out) {
  __m512 v[16];
  for (int k = 0; k < 16; ++k) v[k] = _mm512_loadu_ps(x + 16 * k);
  __m256 lo_lanes[8];
  __m256 hi_lanes[8];
  for (int j = 0; j < 8; ++j) {  // sub-block j = v[2j], v[2j+1]; a NaN element keeps the accumulator
    const __m512 lo = _mm512_min_ps(v[2 * j], _mm512_min_ps(v[2 * j + 1], _mm512_set1_ps(kInf)));
    const __m512 hi = _mm512_max_ps(v[2 * j], _mm512_max_ps(v[2 * j + 1], _mm512_set1_ps(-kInf)));
    lo_lanes[j] = FoldHalves<false>(lo);
    hi_lanes[j] = FoldHalves<true>(hi);
  }
  avx2::Q4kSubBlocks sub;
  avx2::Q4kHeader(avx2::ReduceEight<false>(lo_lanes), avx2::ReduceEight<true>(hi_lanes), out, sub);

  const __m512 fifteen = _mm512_set1_ps(15.0f);
  for (int c = 0; c < 4; ++c) {
    const int jl = 2 * c;
    const int jh = 2 * c + 1;
    for (int g = 0; g < 2; ++g) {  // bytes l = 16g .. 16g+15 of chunk c
      const __m512 yl = _mm512_div_ps(_mm512_add_ps(v[4 * c + g], _mm512_set1_ps(sub.o[jl])), _mm512_set1_ps(sub.s[jl]));
      const __m512 yh =
          _mm512_div_ps(_mm512_add_ps(v[4 * c + 2 + g], _mm512_set1_ps(sub.o[jh])), _mm512_set1_ps(sub.s[jh]));
      const __m512i ql = _mm512_maskz_mov_epi32(sub.valid[jl] ? 0xFFFF : 0, RoundClampUnsigned(yl, fifteen));
      const __m512i qh = _mm512_maskz_mov_epi32(sub.valid[jh] ? 0xFFFF : 0, RoundClampUnsigned(yh, fifteen));
      Store16Bytes(_mm512_or_si512(ql, _mm512_slli_epi32(qh, 4)), out + 16 + 32 * c + 16 * g);
    }
  }
}

// ---- Q6_K (§5.5) --------------------------------------------------------------------------------

APRFS_AVX512 void Q6kBlock(const float* x, uint8_t* out) {
  __m512 v[16];  // v[j] = sub-block j
  __m256 ma_lanes[16];
  for (int j = 0; j < 16; ++j) {
    v[j] = _mm512_loadu_ps(x + 16 * j);
    ma_lanes[j] = FoldHalves<true>(_mm512_max_ps(_mm512_abs_ps(v[j]), _mm512_setzero_ps()));
  }
  alignas(64) float inv[16];
  avx2::Q6kScales(avx2::ReduceEight<true>(ma_lanes), avx2::ReduceEight<true>(ma_lanes + 8), out, inv);

  const __m512 lo = _mm512_set1_ps(-32.0f);
  const __m512 hi = _mm512_set1_ps(31.0f);
  const __m512i bias = _mm512_set1_epi32(32);
  const __m512i low4 = _mm512_set1_epi32(15);
  for (int h = 0; h < 2; ++h) {
    for (int g = 0; g < 2; ++g) {  // l = 16g .. 16g+15
      __m512i q[4];                // a, b, c, e of §5.5: elements 128h + 32r + l
      for (int r = 0; r < 4; ++r) {
        const int j = 8 * h + 2 * r + g;
        q[r] = _mm512_add_epi32(RoundClampSigned(_mm512_mul_ps(v[j], _mm512_set1_ps(inv[j])), lo, hi), bias);
      }
      const __m512i ql_a = _mm512_or_si512(_mm512_and_si512(q[0], low4), _mm512_slli_epi32(_mm512_and_si512(q[2], low4), 4));
      const __m512i ql_b = _mm512_or_si512(_mm512_and_si512(q[1], low4), _mm512_slli_epi32(_mm512_and_si512(q[3], low4), 4));
      const __m512i qh = _mm512_or_si512(
          _mm512_or_si512(_mm512_srli_epi32(q[0], 4), _mm512_slli_epi32(_mm512_srli_epi32(q[1], 4), 2)),
          _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(q[2], 4), 4), _mm512_slli_epi32(_mm512_srli_epi32(q[3], 4), 6)));
      Store16Bytes(ql_a, out + 64 * h + 16 * g);
      Store16Bytes(ql_b, out + 64 * h + 32 + 16 * g);
      Store16Bytes(qh, out + 128 + 32 * h + 16 * g);
    }
  }
}

// ---- AprQ4 (§5.3), eight full blocks at a time ------------------------------------------------

APRFS_AVX512 void AprQ4EightBlocks(const float* x, uint8_t* out) {
  __m512 v[16];  // block b = v[2b], v[2b+1]
  __m256 ma_lanes[8];
  for (int b = 0; b < 8; ++b) {
    v[2 * b] = _mm512_loadu_ps(x + 32 * b);
    v[2 * b + 1] = _mm512_loadu_ps(x + 32 * b + 16);
    const __m512 ma = _mm512_max_ps(_mm512_abs_ps(v[2 * b]), _mm512_max_ps(_mm512_abs_ps(v[2 * b + 1]), _mm512_setzero_ps()));
    ma_lanes[b] = FoldHalves<true>(ma);
  }
  alignas(32) float scale[8];
  avx2::AprQ4Scales(avx2::ReduceEight<true>(ma_lanes), out, scale);
  const __m512 lo = _mm512_set1_ps(-8.0f);
  const __m512 hi = _mm512_set1_ps(7.0f);
  const __m512i bias = _mm512_set1_epi32(8);
  for (int b = 0; b < 8; ++b) {
    const __m512 s = _mm512_set1_ps(scale[b]);
    for (int k = 0; k < 2; ++k) {
      const __m512i nib = _mm512_add_epi32(RoundClampSigned(_mm512_div_ps(v[2 * b + k], s), lo, hi), bias);
      // Each 64-bit lane holds (even element, odd element): even | odd << 4 in its low byte.
      const __m512i pair = _mm512_or_si512(nib, _mm512_srli_epi64(nib, 28));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + kAprQ4BlockBytes * b + 2 + 8 * k), _mm512_cvtepi64_epi8(pair));
    }
  }
}

// ---- AprQ8 (§5.2) ----------------------------------------------------------------------

APRFS_AVX512 void AprQ8(const float* x, size_t n, float scale, uint8_t* out) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_set1_ps(-127.0f);
  const __m512 hi = _mm512_set1_ps(127.0f);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) {
      Store16Bytes(RoundClampSigned(_mm512_div_ps(_mm512_loadu_ps(x + i + 16 * k), s), lo, hi), out + i + 16 * k);
    }
  }
  EncodeAprQ8Ref(x + i, n - i, scale, out + i);
}

// Widening, max_abs and F16 measured no faster on 16 lanes (bench/README.md; a 16-lane F16 kernel
// was slower in the widen + f16 pipeline): those come from the AVX2 table.
CodecKernels MakeAvx512Kernels() {
  CodecKernels k = Avx2Kernels();
  k.e4m3_scaled_to_bf16 = E4m3ScaledToBf16;
  k.q4k_blocks = EachSuperBlock<Q4kBlock, kQ4kBlockBytes>;
  k.q6k_blocks = EachSuperBlock<Q6kBlock, kQ6kBlockBytes>;
  k.apr_q4 = AprQ4ByEightBlocks<AprQ4EightBlocks>;
  k.apr_q8 = AprQ8;
  return k;
}

}  // namespace

const CodecKernels& Avx512Kernels() {
  static const CodecKernels kernels = MakeAvx512Kernels();
  return kernels;
}

}  // namespace aprfs::codec
