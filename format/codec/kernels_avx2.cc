// The AVX2 (+F16C) kernels: 8 lanes, the same operations as the reference in the same order
// (IEEE division, no FMA: "fma" is not in the target), so the bytes are identical. Every
// function carries the target attribute; the rest of the build stays baseline x86-64.
#include <immintrin.h>

#include <cmath>

#include "format/codec/block_layout.h"
#include "format/codec/half.h"
#include "format/codec/kernels_isa.h"
#include "format/codec/reference.h"
#include "format/codec/rust_numeric.h"
#include "format/codec/simd_avx2.h"

namespace aprfs::codec {
namespace {

using namespace avx2;

// ---- Sources -> f32 ---------------------------------------------------------------------------

APRFS_AVX2 void WidenBf16(const uint8_t* src, size_t n, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
    const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(a, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 8), _mm256_slli_epi32(b, 16));
  }
  WidenBf16Ref(src + 2 * i, n - i, out + i);
}

// F16C widening is exact except that it quiets a signalling NaN; NaN lanes get their exact
// bits (sign, all-ones exponent, payload << 13) instead.
APRFS_AVX2 inline __m256 WidenF16Eight(const uint8_t* src) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m256 f = _mm256_cvtph_ps(h);
  const __m256i w = _mm256_cvtepu16_epi32(h);
  const __m256i nan_bits = _mm256_or_si256(
      _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                      _mm256_set1_epi32(0x7F800000)),
      _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3FF)), 13));
  return _mm256_blendv_ps(f, _mm256_castsi256_ps(nan_bits), _mm256_cmp_ps(f, f, _CMP_UNORD_Q));
}

APRFS_AVX2 void WidenF16(const uint8_t* src, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, WidenF16Eight(src + 2 * i));
  WidenF16Ref(src + 2 * i, n - i, out + i);
}

// E4m3ScaledToBf16 of 8 bytes, as 8 int32 lanes holding the bf16 bits.
APRFS_AVX2 inline __m256i E4m3ScaledToBf16Eight(const uint8_t* src, __m256 scale) {
  const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  const __m256i em = _mm256_and_si256(w, _mm256_set1_epi32(0x7F));
  // E >= 1: shift E and M into place and rebias the exponent (7 -> 127). E = 0: M * 2^-9.
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23));
  const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(0x1p-9f));
  const __m256i is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), em);
  const __m256i is_nan = _mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7F));
  __m256i mag = _mm256_blendv_epi8(normal, _mm256_castps_si256(subnormal), is_subnormal);
  mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7FC00000), is_nan);
  const __m256 x = _mm256_castsi256_ps(_mm256_or_si256(mag, _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x80)), 24)));
  // A NaN byte keeps its own NaN whatever the scale (reference.h).
  const __m256i y = _mm256_blendv_epi8(_mm256_castps_si256(_mm256_mul_ps(x, scale)), _mm256_castps_si256(x), is_nan);
  // f32 -> bf16: RNE on the bits, or (bits >> 16) | 0x40 for NaN.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(y, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(y, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(y, 16), _mm256_set1_epi32(0x40));
  const __m256 yf = _mm256_castsi256_ps(y);
  return _mm256_blendv_epi8(rounded, quieted, _mm256_castps_si256(_mm256_cmp_ps(yf, yf, _CMP_UNORD_Q)));
}

APRFS_AVX2 void E4m3ScaledToBf16(const uint8_t* src, size_t n, float scale, uint16_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = E4m3ScaledToBf16Eight(src + i, s);
    const __m256i hi = E4m3ScaledToBf16Eight(src + i + 8, s);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  E4m3ScaledToBf16Ref(src + i, n - i, scale, out + i);
}

// ---- Q4_K (§5.4.2) ------------------------------------------------------------------------------

APRFS_AVX2 void Q4kBlock(const float* x, uint8_t* out) {
  __m256 lo_lanes[8];
  __m256 hi_lanes[8];
  for (int j = 0; j < 8; ++j) {
    __m256 lo = _mm256_set1_ps(kInf);
    __m256 hi = _mm256_set1_ps(-kInf);
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 32 * j + 8 * k);
      lo = _mm256_min_ps(v, lo);
      hi = _mm256_max_ps(v, hi);
    }
    lo_lanes[j] = lo;
    hi_lanes[j] = hi;
  }
  Q4kSubBlocks sub;
  Q4kHeader(ReduceEight<false>(lo_lanes), ReduceEight<true>(hi_lanes), out, sub);
  const __m256 fifteen = _mm256_set1_ps(15.0f);
  for (int c = 0; c < 4; ++c) {
    const int jl = 2 * c;
    const int jh = 2 * c + 1;
    __m256i bytes[4];
    for (int g = 0; g < 4; ++g) {
      const __m256 vl = _mm256_loadu_ps(x + 64 * c + 8 * g);
      const __m256 vh = _mm256_loadu_ps(x + 64 * c + 32 + 8 * g);
      const __m256i ql = _mm256_and_si256(
          RoundClampUnsigned(_mm256_div_ps(_mm256_add_ps(vl, _mm256_set1_ps(sub.o[jl])), _mm256_set1_ps(sub.s[jl])), fifteen),
          _mm256_set1_epi32(sub.valid[jl]));
      const __m256i qh = _mm256_and_si256(
          RoundClampUnsigned(_mm256_div_ps(_mm256_add_ps(vh, _mm256_set1_ps(sub.o[jh])), _mm256_set1_ps(sub.s[jh])), fifteen),
          _mm256_set1_epi32(sub.valid[jh]));
      bytes[g] = _mm256_or_si256(ql, _mm256_slli_epi32(qh, 4));
    }
    StoreBytes32<false>(bytes[0], bytes[1], bytes[2], bytes[3], out + 16 + 32 * c);
  }
}

// ---- Q6_K (§5.5) --------------------------------------------------------------------------------

APRFS_AVX2 void Q6kBlock(const float* x, uint8_t* out) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 ma_lanes[16];
  for (int j = 0; j < 16; ++j) {
    const __m256 a = _mm256_max_ps(Abs(_mm256_loadu_ps(x + 16 * j)), zero);
    ma_lanes[j] = _mm256_max_ps(Abs(_mm256_loadu_ps(x + 16 * j + 8)), a);
  }
  alignas(32) float inv[16];
  Q6kScales(ReduceEight<true>(ma_lanes), ReduceEight<true>(ma_lanes + 8), out, inv);

  const __m256 lo = _mm256_set1_ps(-32.0f);
  const __m256 hi = _mm256_set1_ps(31.0f);
  const __m256i bias = _mm256_set1_epi32(32);
  const __m256i low4 = _mm256_set1_epi32(15);
  for (int h = 0; h < 2; ++h) {
    __m256i ql_a[4], ql_b[4], qh[4];
    for (int g = 0; g < 4; ++g) {
      __m256i v[4];  // a, b, c, e of §5.5 for l = 8g .. 8g+7
      for (int r = 0; r < 4; ++r) {
        const int i = 128 * h + 32 * r + 8 * g;
        v[r] = _mm256_add_epi32(
            RoundClampSigned(_mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(inv[i / 16])), lo, hi), bias);
      }
      ql_a[g] = _mm256_or_si256(_mm256_and_si256(v[0], low4), _mm256_slli_epi32(_mm256_and_si256(v[2], low4), 4));
      ql_b[g] = _mm256_or_si256(_mm256_and_si256(v[1], low4), _mm256_slli_epi32(_mm256_and_si256(v[3], low4), 4));
      qh[g] = _mm256_or_si256(
          _mm256_or_si256(_mm256_srli_epi32(v[0], 4), _mm256_slli_epi32(_mm256_srli_epi32(v[1], 4), 2)),
          _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(v[2], 4), 4), _mm256_slli_epi32(_mm256_srli_epi32(v[3], 4), 6)));
    }
    StoreBytes32<false>(ql_a[0], ql_a[1], ql_a[2], ql_a[3], out + 64 * h);
    StoreBytes32<false>(ql_b[0], ql_b[1], ql_b[2], ql_b[3], out + 64 * h + 32);
    StoreBytes32<false>(qh[0], qh[1], qh[2], qh[3], out + 128 + 32 * h);
  }
}

// ---- AprQ4 (§5.3), eight full blocks at a time ------------------------------------------------

APRFS_AVX2 void AprQ4EightBlocks(const float* x, uint8_t* out) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 ma_lanes[8];
  for (int b = 0; b < 8; ++b) {
    __m256 ma = zero;
    for (int k = 0; k < 4; ++k) ma = _mm256_max_ps(Abs(_mm256_loadu_ps(x + 32 * b + 8 * k)), ma);
    ma_lanes[b] = ma;
  }
  alignas(32) float scale8[8];
  AprQ4Scales(ReduceEight<true>(ma_lanes), out, scale8);
  const __m256 lo = _mm256_set1_ps(-8.0f);
  const __m256 hi = _mm256_set1_ps(7.0f);
  const __m256i bias = _mm256_set1_epi32(8);
  for (int b = 0; b < 8; ++b) {
    const __m256 s = _mm256_set1_ps(scale8[b]);
    __m256i nib[4];
    for (int k = 0; k < 4; ++k) {
      nib[k] = _mm256_add_epi32(RoundClampSigned(_mm256_div_ps(_mm256_loadu_ps(x + 32 * b + 8 * k), s), lo, hi), bias);
    }
    alignas(32) uint8_t codes[32];  // one nibble a byte, in element order
    StoreBytes32<false>(nib[0], nib[1], nib[2], nib[3], codes);
    // Byte pairs (even element, odd element) -> even | odd << 4.
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(codes)),
                                               _mm256_set1_epi16(0x1001));
    const __m128i packed = _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + kAprQ4BlockBytes * b + 2), packed);
  }
}

// ---- max_abs, AprQ8 (§5.2) ----------------------------------------------------------------------

APRFS_AVX2 float MaxAbs(const float* x, size_t n, float acc) {
  // fmax(NaN, v) = v: a NaN accumulator is replaced by the next element, as the fold does.
  while (n > 0 && std::isnan(acc)) {
    acc = std::fabs(*x++);
    --n;
  }
  if (std::isnan(acc)) return acc;  // n == 0
  // With a non-NaN accumulator the fold is the max of acc and the non-NaN |x_i|, in any order
  // (an equal ±0 pair resolves to the later operand, +0, both ways).
  __m256 m[4];
  for (auto& v : m) v = _mm256_set1_ps(-kInf);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) m[k] = _mm256_max_ps(Abs(_mm256_loadu_ps(x + i + 8 * k)), m[k]);
  }
  const float vector_max = HorizontalMax(_mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
  return MaxAbsRef(x + i, n - i, RustFmax(acc, vector_max));
}

APRFS_AVX2 void AprQ8(const float* x, size_t n, float scale, uint8_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-127.0f);
  const __m256 hi = _mm256_set1_ps(127.0f);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = RoundClampSigned(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), s), lo, hi);
    StoreBytes32<true>(q[0], q[1], q[2], q[3], out + i);
  }
  EncodeAprQ8Ref(x + i, n - i, scale, out + i);
}

// ---- F16 (§5.1) ---------------------------------------------------------------------------------

APRFS_AVX2 void F16(const float* x, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(x + i + 8), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i + 16), b);
  }
  EncodeF16Ref(x + i, n - i, out + 2 * i);
}

constexpr CodecKernels kAvx2 = {
    .widen_bf16 = WidenBf16,
    .widen_f16 = WidenF16,
    .e4m3_scaled_to_bf16 = E4m3ScaledToBf16,
    .q4k_blocks = EachSuperBlock<Q4kBlock, kQ4kBlockBytes>,
    .q6k_blocks = EachSuperBlock<Q6kBlock, kQ6kBlockBytes>,
    .ggml_q8_0_blocks = GgmlQ8_0BlocksAvx2,
    .ggml_q4k_blocks = GgmlQ4KBlocksAvx2,
    .ggml_q5k_blocks = GgmlQ5KBlocksAvx2,
    .ggml_q6k_blocks = GgmlQ6KBlocksAvx2,
    .apr_q4 = AprQ4ByEightBlocks<AprQ4EightBlocks>,
    .max_abs = MaxAbs,
    .apr_q8 = AprQ8,
    .f16 = F16,
};

}  // namespace

const CodecKernels& Avx2Kernels() { return kAvx2; }

}  // namespace aprfs::codec
