// The scalar conversions of format/codec/half.h against independent implementations: x86 F16C
// (where the CPU has it) and GCC's software _Float16 for f32 -> f16, plain arithmetic for the
// widenings and E4M3.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "format/codec/half.h"
#include "format/codec/kernels.h"

namespace aprfs::codec {
namespace {

bool HaveF16c() { return IsaAvailable(Isa::kAvx2); }  // AVX2 is only chosen with F16C

// x86's own conversion, 8 at a time; imm 0 = round to nearest even regardless of MXCSR.
__attribute__((target("avx,f16c"))) void F16cConvert(const float* x, uint16_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(_mm256_loadu_ps(x), 0));
}

// GCC's soft-float binary16 (RNE); its NaN spelling is not §4.4's, so NaN is checked elsewhere.
uint16_t SoftF16(float x) { return std::bit_cast<uint16_t>(static_cast<_Float16>(x)); }

// Checks F32ToF16 on a batch of bit patterns against F16C and, for non-NaN inputs, against
// _Float16 (always where F16C is absent, and when `both` is set).
void ExpectF32ToF16Batch(const std::vector<uint32_t>& patterns, bool both) {
  std::vector<float> x(patterns.size() + 8, 0.0f);
  std::memcpy(x.data(), patterns.data(), patterns.size() * 4);
  const bool f16c = HaveF16c();
  std::vector<uint16_t> hardware(x.size());
  if (f16c) {
    for (size_t i = 0; i < patterns.size(); i += 8) F16cConvert(x.data() + i, hardware.data() + i);
  }
  int failures = 0;
  for (size_t i = 0; i < patterns.size() && failures < 10; ++i) {
    const uint16_t got = F32ToF16(x[i]);
    if (f16c && got != hardware[i]) {
      ++failures;
      ADD_FAILURE() << std::hex << "f32 bits " << patterns[i] << ": " << got << ", F16C " << hardware[i];
    }
    if ((both || !f16c) && !std::isnan(x[i]) && got != SoftF16(x[i])) {
      ++failures;
      ADD_FAILURE() << std::hex << "f32 bits " << patterns[i] << ": " << got << ", _Float16 " << SoftF16(x[i]);
    }
  }
}

TEST(CodecHalf, F32ToF16MatchesF16cOnEvery97thPattern) {
  std::vector<uint32_t> batch;
  batch.reserve(1 << 20);
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 97) {
    batch.push_back(static_cast<uint32_t>(b));
    if (batch.size() == batch.capacity()) {
      ExpectF32ToF16Batch(batch, false);
      if (HasFailure()) return;
      batch.clear();
    }
  }
  ExpectF32ToF16Batch(batch, false);
}

// Around every rounding boundary: for each pair of adjacent binary16 values (both signs, the
// subnormals, and the step to Inf), the f32 midpoint and its neighbours up to 2 ulps away.
TEST(CodecHalf, F32ToF16MatchesF16cAtEveryRoundingBoundary) {
  std::vector<uint32_t> batch;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = F16ToF32(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7C00 ? 65536.0 : F16ToF32(static_cast<uint16_t>(h + 1));
    const uint32_t mid = std::bit_cast<uint32_t>(static_cast<float>((lo + hi) / 2));  // exact in f32
    for (uint32_t sign : {0u, 0x80000000u}) {
      for (int d = -2; d <= 2; ++d) batch.push_back(sign | (mid + d));
    }
  }
  ExpectF32ToF16Batch(batch, true);
}

TEST(CodecHalf, F32ToF16NaNIsQuietedWithItsTopPayload) {
  for (uint32_t payload : {1u, 0x1FFFu, 0x2000u, 0x3FFFFFu, 0x400000u, 0x7FFFFFu, 0x155555u}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t bits = sign | 0x7F800000u | payload;
      EXPECT_EQ(F32ToF16(std::bit_cast<float>(bits)), (sign >> 16) | 0x7C00 | 0x200 | (payload >> 13))
          << std::hex << bits;
    }
  }
}

TEST(CodecHalf, F16ToF32IsExactForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = F16ToF32(static_cast<uint16_t>(h));
    const uint32_t sign = h >> 15;
    const uint32_t e = (h >> 10) & 31;
    const uint32_t m = h & 0x3FF;
    if (e == 31) {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), (sign << 31) | 0x7F800000u | (m << 13)) << h;  // Inf, NaN unquieted
      continue;
    }
    double value = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25);
    if (sign) value = -value;
    EXPECT_EQ(got, static_cast<float>(value)) << h;
    EXPECT_EQ(std::signbit(got), sign == 1) << h;
    EXPECT_EQ(F32ToF16(got), h) << h;  // and back
  }
}

TEST(CodecHalf, Bf16RoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16ToF32(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    EXPECT_EQ(F32ToBf16(f), std::isnan(f) ? (b | 0x40) : b);
  }
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // overflow -> Inf
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormals kept
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x00008000u)), 0x0000);
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // NaN quieted
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0xFFA12345u)), 0xFFE1);
}

TEST(CodecHalf, E4m3EveryByte) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float got = E4m3ToF32(static_cast<uint8_t>(b));
    const int e = (b >> 3) & 15;
    const int m = b & 7;
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(got)) << b;
      EXPECT_EQ(std::signbit(got), b >= 0x80) << b;
      continue;
    }
    double value = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    if (b & 0x80) value = -value;
    EXPECT_EQ(got, static_cast<float>(value)) << b;
    EXPECT_EQ(std::signbit(got), b >= 0x80) << b;
  }
  EXPECT_EQ(E4m3ToF32(0x7E), 448.0f);
}

}  // namespace
}  // namespace aprfs::codec
