// TensorCodec: the geometry that maps a computed tensor's output bytes to source elements, and
// the piecewise encoding the read path does. Whole tensors encoded in arbitrary pieces must give
// the bytes of apr-quantization.md §6.7 (row padding included), and FP8 sources must decode per
// §9.4 whatever range is asked for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fetch/sha256.h"
#include "format/codec/half.h"
#include "format/codec/kernels.h"
#include "format/codec/reference.h"
#include "format/codec/tensor_codec.h"

namespace aprfs {
namespace {

// §6.0: m[i] = f32(cos(0.11 i) * 0.02).
std::vector<float> VectorM() {
  std::vector<float> m(900);
  for (int i = 0; i < 900; ++i) m[i] = static_cast<float>(std::cos(0.11 * i) * 0.02);
  return m;
}

TensorCodec F32Codec(Encoding to, uint64_t rows, uint64_t cols, bool row_padded = false) {
  TensorCodec codec;
  codec.from = SourceDtype::kF32;
  codec.to = to;
  codec.rows = rows;
  codec.cols = cols;
  codec.row_padded = row_padded;
  return codec;
}

// The whole encoded tensor, computed in random runs of units as the read path cuts them.
std::string EncodeInPieces(const TensorCodec& codec, const std::vector<float>& values,
                           std::mt19937& random) {
  const codec::CodecKernels& kernels = codec::BestKernels();
  const float q8_scale = codec::AprQ8Scale(codec::MaxAbsRef(values.data(), values.size(), 0.0f));
  std::string out(EncodedSize(codec), '\0');
  EncodeHeader(codec, q8_scale, reinterpret_cast<uint8_t*>(out.data()));
  std::vector<float> scratch;
  const uint64_t units = UnitCount(codec);
  for (uint64_t first = 0; first < units;) {
    const uint64_t end = std::min(units, first + 1 + random() % 5);
    const ElementRange source = UnitsSource(codec, first, end);
    EncodeUnits(codec, kernels, first, end, values.data() + source.first, q8_scale, scratch,
                reinterpret_cast<uint8_t*>(out.data()) + UnitOffset(codec, first));
    first = end;
  }
  return out;
}

TEST(TensorCodecTest, SizesFollowTheEncodingsTable) {
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kQ4K, 3, 300, true)), 3u * 2 * 144);
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kQ4K, 1, 900)), 4u * 144);
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kAprQ8, 1, 900)), 904u);
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kAprQ8, 1, 0)), 0u) << "an empty AprQ8 has no scale";
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kAprQ4, 1, 900)), 29u * 18);
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kF16, 30, 30)), 1800u);
  EXPECT_EQ(EncodedSize(F32Codec(Encoding::kF32, 2, 5)), 40u);
}

TEST(TensorCodecTest, RowPaddedUnitsStayInTheirRow) {
  const TensorCodec codec = F32Codec(Encoding::kQ4K, 3, 300, true);
  EXPECT_EQ(UnitCount(codec), 6u);
  EXPECT_EQ(UnitSource(codec, 0).first, 0u);
  EXPECT_EQ(UnitSource(codec, 0).count, 256u);
  EXPECT_EQ(UnitSource(codec, 1).first, 256u);
  EXPECT_EQ(UnitSource(codec, 1).count, 44u) << "the row's last block is padded, not continued";
  EXPECT_EQ(UnitSource(codec, 2).first, 300u);
  const ElementRange middle = UnitsSource(codec, 1, 4);
  EXPECT_EQ(middle.first, 256u);
  EXPECT_EQ(middle.end(), 600u) << "units 1..3 end with row 1";
}

TEST(TensorCodecTest, UnitsCoveringAByteRangeIncludeTheHeader) {
  const TensorCodec q8 = F32Codec(Encoding::kAprQ8, 1, 100);
  EXPECT_EQ(UnitsCovering(q8, 0, 4).end, 0u) << "the scale alone needs no element";
  UnitSpan span = UnitsCovering(q8, 2, 10);
  EXPECT_EQ(span.first, 0u);
  EXPECT_EQ(span.end, 6u);
  EXPECT_EQ(UnitOffset(q8, 6), 10u);
  const TensorCodec q4k = F32Codec(Encoding::kQ4K, 1, 1000);
  span = UnitsCovering(q4k, 143, 145);
  EXPECT_EQ(span.first, 0u);
  EXPECT_EQ(span.end, 2u);
  span = UnitsCovering(q4k, 0, EncodedSize(q4k));
  EXPECT_EQ(span.end, 4u);
}

// §6.7 through the piecewise path: row-padded Q4_K, flat Q4_K, AprQ8, AprQ4 and F16 of `m`.
TEST(TensorCodecTest, PiecewiseEncodingGivesTheWorkedExamplesBytes) {
  const std::vector<float> m = VectorM();
  std::mt19937 random(7);
  struct Case {
    TensorCodec codec;
    uint64_t size;
    const char* sha256;
  } cases[] = {
      {F32Codec(Encoding::kQ4K, 3, 300, true), 864,
       "200c34f058243d670c27cddc7af4378c960301812fab146b502fdcdc4eb1366a"},
      {F32Codec(Encoding::kQ4K, 1, 900), 576,
       "0f0522ff6705ccf27af0190ac7cf1827d06c5b1372f94fd3119e3edd6c548518"},
      {F32Codec(Encoding::kAprQ8, 1, 900), 904,
       "8658890a797cfd1cf6a3e82a52c1e2565a0e6109bdded2a827263ec28b6cc1a3"},
      {F32Codec(Encoding::kAprQ4, 1, 900), 522,
       "c84b7a4116440f49796a0cc1355bfbc9d467a06c7a36f7a64018f4b12956c83b"},
      {F32Codec(Encoding::kF16, 3, 300), 1800,
       "91a6c2604975f9f3880f123714db1aa64c66712623dcbceaf02224ce08fb3ff6"},
  };
  for (const Case& c : cases) {
    for (int round = 0; round < 20; ++round) {
      const std::string bytes = EncodeInPieces(c.codec, m, random);
      ASSERT_EQ(bytes.size(), c.size) << EncodingName(c.codec.to);
      ASSERT_EQ(Sha256Hex(bytes), c.sha256) << EncodingName(c.codec.to) << " round " << round;
    }
  }
}

// FP8 weights decode per §9.4 (through BF16) whatever range is asked, across partial tiles.
TEST(TensorCodecTest, Fp8DecodesAnyRangeWithItsBlockScales) {
  for (ScaleDtype scale_dtype : {ScaleDtype::kF32, ScaleDtype::kE8M0}) {
    TensorCodec codec;
    codec.from = SourceDtype::kE4M3;
    codec.to = Encoding::kBF16;
    codec.rows = 200;
    codec.cols = 300;
    codec.block_rows = 128;
    codec.block_cols = 128;
    codec.scale_dtype = scale_dtype;
    std::mt19937 random(3);
    std::vector<uint8_t> weights(200 * 300);
    for (uint8_t& b : weights) {
      do b = static_cast<uint8_t>(random());
      while ((b & 0x7F) == 0x7F);  // no NaN codes
    }
    const uint64_t scale_bytes = scale_dtype == ScaleDtype::kF32 ? 4 : 1;
    std::vector<uint8_t> scales(2 * 3 * scale_bytes);
    std::vector<float> scale_values(6);
    for (int i = 0; i < 6; ++i) {
      if (scale_dtype == ScaleDtype::kF32) {
        scale_values[i] = 0.001f * static_cast<float>(i + 1) + 0.0123f;
        std::memcpy(scales.data() + 4 * i, &scale_values[i], 4);
      } else {
        scales[i] = static_cast<uint8_t>(120 + i);
        scale_values[i] = std::ldexp(1.0f, 120 + i - 127);
      }
    }
    for (int round = 0; round < 200; ++round) {
      const uint64_t first = random() % (200 * 300);
      const ElementRange range{first, 1 + random() % std::min<uint64_t>(2000, 200 * 300 - first)};
      const ByteRange needed = ScaleBytesFor(codec, range);
      std::vector<float> out(range.count);
      DecodeElements(codec, codec::BestKernels(), range, weights.data() + range.first,
                     scales.data() + needed.offset, out.data());
      for (uint64_t i = 0; i < range.count; ++i) {
        const uint64_t e = range.first + i;
        const float s = scale_values[(e / 300 / 128) * 3 + (e % 300) / 128];
        const float want = codec::Bf16ToF32(codec::F32ToBf16(codec::E4m3ToF32(weights[e]) * s));
        ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace aprfs
