// The worked examples of apr-quantization.md (§4.3, §4.4, §6, §9.4), byte for byte, through the
// reference encoders and through every kernel table this CPU can run.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fetch/sha256.h"
#include "format/codec/block_layout.h"
#include "format/codec/half.h"
#include "format/codec/kernels.h"
#include "format/codec/reference.h"
#include "tests/unit/codec_test_util.h"

namespace aprfs::codec {
namespace {

using testing::Hex;
using testing::ToHex;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
const std::vector<float> kEight = {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 0.0f, 1.5f, -2.0f};

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

// A whole AprQ8 tensor (§5.2): LE32 scale, then the codes.
std::vector<uint8_t> AprQ8Tensor(const CodecKernels& k, const std::vector<float>& x) {
  std::vector<uint8_t> out(4 + x.size());
  const float scale = AprQ8Scale(k.max_abs(x.data(), x.size(), 0.0f));
  StoreLe32(out.data(), std::bit_cast<uint32_t>(scale));
  k.apr_q8(x.data(), x.size(), scale, out.data() + 4);
  return out;
}

std::vector<uint8_t> AprQ4Tensor(const CodecKernels& k, const std::vector<float>& x) {
  std::vector<uint8_t> out((x.size() + 31) / 32 * kAprQ4BlockBytes);
  k.apr_q4(x.data(), x.size(), out.data());
  return out;
}

std::vector<uint8_t> F16Tensor(const CodecKernels& k, const std::vector<float>& x) {
  std::vector<uint8_t> out(2 * x.size());
  k.f16(x.data(), x.size(), out.data());
  return out;
}

// Q4_K / Q6_K of a tensor (§5.4.3): a [rows, cols] matrix padded row by row to 256, or (rows
// = 1, cols = N) the flat layout.
template <typename BlockEncoder>
std::vector<uint8_t> KQuantTensor(BlockEncoder encode, size_t block_bytes, const std::vector<float>& x,
                                  size_t rows, size_t cols) {
  const size_t spr = (cols + kSuperBlock - 1) / kSuperBlock;
  std::vector<float> padded(rows * spr * kSuperBlock, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    std::copy(x.begin() + r * cols, x.begin() + (r + 1) * cols, padded.begin() + r * spr * kSuperBlock);
  }
  std::vector<uint8_t> out(rows * spr * block_bytes);
  encode(padded.data(), rows * spr, out.data());
  return out;
}

TEST(CodecExamples, AprQ8OfEightValues) {  // §6.1
  for (Isa isa : AvailableIsas()) {
    EXPECT_EQ(ToHex(AprQ8Tensor(Kernels(isa), kEight)), "04 02 81 3c 20 c0 10 7f d0 00 5f 81") << IsaName(isa);
  }
}

TEST(CodecExamples, AprQ4OfEightValuesAndOfRamp) {  // §6.2
  const std::vector<float> ramp32 = testing::Ramp(32);
  for (Isa isa : AvailableIsas()) {
    EXPECT_EQ(ToHex(AprQ4Tensor(Kernels(isa), kEight)), "92 34 5a f9 85 1d 00 00 00 00 00 00 00 00 00 00 00 00")
        << IsaName(isa);
    EXPECT_EQ(ToHex(AprQ4Tensor(Kernels(isa), ramp32)), "92 34 11 11 11 11 11 22 22 22 22 22 22 22 22 22 33 33")
        << IsaName(isa);
  }
}

TEST(CodecExamples, AllZeroBlocks) {  // §5.3, §6.3
  const std::vector<float> zeros(256, 0.0f);
  std::vector<uint8_t> q4k_expected = Hex("ff 03 ff 03 01 01 01 01 00 00 00 00 01 01 01 01");
  q4k_expected.resize(kQ4kBlockBytes, 0x00);
  std::vector<uint8_t> q6k_expected(128, 0x00);
  q6k_expected.resize(192, 0xaa);
  q6k_expected.resize(208, 0x01);
  q6k_expected.push_back(0xff);
  q6k_expected.push_back(0x03);
  std::vector<uint8_t> q4_expected = {0x00, 0x3c};
  q4_expected.resize(kAprQ4BlockBytes, 0x88);
  for (Isa isa : AvailableIsas()) {
    const CodecKernels& k = Kernels(isa);
    EXPECT_EQ(ToHex(KQuantTensor(k.q4k_blocks, kQ4kBlockBytes, zeros, 1, 256)), ToHex(q4k_expected)) << IsaName(isa);
    EXPECT_EQ(ToHex(KQuantTensor(k.q6k_blocks, kQ6kBlockBytes, zeros, 1, 256)), ToHex(q6k_expected)) << IsaName(isa);
    EXPECT_EQ(ToHex(AprQ4Tensor(k, std::vector<float>(32, 0.0f))), ToHex(q4_expected)) << IsaName(isa);
    std::vector<uint8_t> q8_expected = {0x00, 0x00, 0x80, 0x3f};
    q8_expected.resize(4 + 300, 0x00);
    EXPECT_EQ(ToHex(AprQ8Tensor(k, std::vector<float>(300, 0.0f))), ToHex(q8_expected)) << IsaName(isa);
  }
}

TEST(CodecExamples, Q4kOfRamp) {  // §6.4
  const std::vector<uint8_t> expected = Hex(R"(
    33 10 10 28 ff ff ff ff 3f 2f 1f 10 0f 0f 0f 0f
    00 00 11 11 22 22 33 33 44 44 55 55 66 66 77 77
    78 88 89 99 9a aa ab bb bc cc cd dd de ee ef ff
    00 10 10 21 21 32 32 43 43 54 54 65 65 76 76 87
    87 88 98 99 a9 aa ba bb cb cc dc dd ed ee fe ff
    f0 f0 f1 f1 f2 f2 f3 f3 f4 f4 f5 f5 f6 f6 f7 f7
    f8 f8 f9 f9 fa fa fb fb fc fc fd fd fe fe ff ff
    ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff
    ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff)");
  for (Isa isa : AvailableIsas()) {
    EXPECT_EQ(ToHex(KQuantTensor(Kernels(isa).q4k_blocks, kQ4kBlockBytes, testing::Ramp(), 1, 256)), ToHex(expected))
        << IsaName(isa);
  }
}

TEST(CodecExamples, Q4kOfWaveAndPos) {  // §6.5
  const std::vector<uint8_t> wave = Hex(R"(
    e8 06 78 12 ff ff ff ff ff ff ff ff ff ff ef ef
    27 5a 8d ae df ef fd fb d9 b6 94 61 30 10 01 02
    15 38 5a 8d ae df ef fd fb d9 b6 93 61 30 10 01
    10 01 03 15 38 5a 8d be df ef fd fb d9 b6 93 61
    30 10 01 03 15 38 5a 8d be df ef fd fb d9 b6 93
    b6 83 61 30 10 01 03 15 38 5b 8d be df ef fd fb
    d8 b6 83 61 30 10 01 03 15 38 5b 8d be df ef fd
    ee fd eb d8 b5 83 51 30 10 01 03 15 38 5b 8d be
    df ee fd eb d8 b5 83 51 30 10 01 03 15 38 5b 8d)");
  std::vector<uint8_t> pos = Hex("19 02 ff 03 ff ff ff ff 00 00 00 00 0f 0f 0f 0f");
  pos.resize(kQ4kBlockBytes, 0xff);
  for (Isa isa : AvailableIsas()) {
    const CodecKernels& k = Kernels(isa);
    EXPECT_EQ(ToHex(KQuantTensor(k.q4k_blocks, kQ4kBlockBytes, testing::Wave(), 1, 256)), ToHex(wave)) << IsaName(isa);
    EXPECT_EQ(ToHex(KQuantTensor(k.q4k_blocks, kQ4kBlockBytes, testing::Pos(), 1, 256)), ToHex(pos)) << IsaName(isa);
  }
}

TEST(CodecExamples, Q6kOfRamp) {  // §6.6
  const std::vector<uint8_t> expected = Hex(R"(
    11 21 21 32 32 42 42 53 53 63 63 74 74 74 84 85
    11 21 32 32 42 42 53 63 63 73 84 84 94 a5 a5 b5
    11 21 32 42 52 63 73 83 94 a4 b4 c4 d5 e5 f5 06
    11 31 52 72 92 b3 d3 f4 14 34 45 65 86 a6 c6 e7
    90 a2 a4 a6 b8 ba cc ce c0 d2 d5 e7 e9 eb fd ff
    a0 b1 b2 b3 b4 c5 c6 c7 d8 d9 da eb ec ed fe ff
    b5 b6 b6 c7 c8 c8 d9 da da db eb ec ed ed fe ff
    b7 c8 c8 c9 c9 da da db db ec ec ed ed fe fe ff
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 40
    00 00 00 00 00 00 00 00 40 40 40 40 40 40 40 40
    fe fe fe fe fe fe fe fe ff ff ff ff ff ff ff ff
    ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff
    7f 6f 5f 4f 40 30 20 10 0f 1f 2f 3f 4e 5e 6e 7e
    29 10)");
  for (Isa isa : AvailableIsas()) {
    EXPECT_EQ(ToHex(KQuantTensor(Kernels(isa).q6k_blocks, kQ6kBlockBytes, testing::Ramp(), 1, 256)), ToHex(expected))
        << IsaName(isa);
  }
}

TEST(CodecExamples, RowPaddingOfM) {  // §6.7
  const std::vector<float> m = testing::M();
  auto sha = [](const std::vector<uint8_t>& bytes) {
    return Sha256Hex(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  };
  const char* kHeaders[6] = {
      "c6 02 33 0d bf fd f6 ed ff bb ff db f6 31 f9 de", "c6 02 34 0d 3f 1e 01 01 3f 00 00 00 01 01 01 01",
      "c6 02 33 0d e8 f3 fb bf ff e7 ff fe ff fd 07 fe", "9e 01 2f 0d 3f 36 02 02 0b 3f 00 00 02 02 02 02",
      "c6 02 34 0d bf fc f6 ec 3f ff ed ff f7 f2 5a fe", "c6 02 32 0d 3f 1e 01 01 3f 3c 00 00 01 01 01 01",
  };
  for (Isa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    const CodecKernels& k = Kernels(isa);
    const std::vector<uint8_t> q4k_rows = KQuantTensor(k.q4k_blocks, kQ4kBlockBytes, m, 3, 300);
    ASSERT_EQ(q4k_rows.size(), 864u);
    EXPECT_EQ(sha(q4k_rows), "200c34f058243d670c27cddc7af4378c960301812fab146b502fdcdc4eb1366a");
    for (int b = 0; b < 6; ++b) EXPECT_EQ(ToHex(q4k_rows.data() + b * kQ4kBlockBytes, 16), kHeaders[b]) << "block " << b;

    const std::vector<uint8_t> q4k_flat = KQuantTensor(k.q4k_blocks, kQ4kBlockBytes, m, 1, 900);
    EXPECT_EQ(q4k_flat.size(), 576u);
    EXPECT_EQ(sha(q4k_flat), "0f0522ff6705ccf27af0190ac7cf1827d06c5b1372f94fd3119e3edd6c548518");

    const std::vector<uint8_t> q6k_rows = KQuantTensor(k.q6k_blocks, kQ6kBlockBytes, m, 3, 300);
    EXPECT_EQ(q6k_rows.size(), 1260u);
    EXPECT_EQ(sha(q6k_rows), "23a7ebe88d41e06294511c9d2671751e1ffbf5e3e662215a449995be4d974eba");

    const std::vector<uint8_t> q8 = AprQ8Tensor(k, m);
    EXPECT_EQ(q8.size(), 904u);
    EXPECT_EQ(ToHex(q8.data(), 8), "4d 21 25 39 7f 7e 7c 78");
    EXPECT_EQ(sha(q8), "8658890a797cfd1cf6a3e82a52c1e2565a0e6109bdded2a827263ec28b6cc1a3");

    const std::vector<uint8_t> q4 = AprQ4Tensor(k, m);
    ASSERT_EQ(q4.size(), 522u);
    EXPECT_EQ(ToHex(q4.data(), 18), "da 19 ff ff ee de cc ab 9a 78 67 55 34 23 22 11 11 11");
    EXPECT_EQ(ToHex(q4.data() + 28 * 18, 18), "8f 14 31 75 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
    EXPECT_EQ(sha(q4), "c84b7a4116440f49796a0cc1355bfbc9d467a06c7a36f7a64018f4b12956c83b");

    const std::vector<uint8_t> f16 = F16Tensor(k, m);
    EXPECT_EQ(f16.size(), 1800u);
    EXPECT_EQ(sha(f16), "91a6c2604975f9f3880f123714db1aa64c66712623dcbceaf02224ce08fb3ff6");
  }
}

TEST(CodecExamples, AprQ8WithNaNAndInf) {  // §4.3
  for (Isa isa : AvailableIsas()) {
    EXPECT_EQ(ToHex(AprQ8Tensor(Kernels(isa), {1.0f, kNaN, -0.5f})), "04 02 01 3c 7f 00 c0") << IsaName(isa);
    EXPECT_EQ(ToHex(AprQ8Tensor(Kernels(isa), {1.0f, kInf, -0.5f})), "00 00 80 7f 00 00 00") << IsaName(isa);
  }
}

TEST(CodecExamples, F32ToF16SpotValues) {  // §4.4
  EXPECT_EQ(F32ToF16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even
  EXPECT_EQ(F32ToF16(3e-8f), 0x0001);
  EXPECT_EQ(F32ToF16(6.1e-5f), 0x03FF);
  EXPECT_EQ(F32ToF16(Bf16ToF32(0x3F81)), 0x3C08);
  EXPECT_EQ(F32ToF16(Bf16ToF32(0x477F)), 0x7BF8);
  EXPECT_EQ(F32ToF16(Bf16ToF32(0x4780)), 0x7C00);
  EXPECT_EQ(F32ToF16(-kInf), 0xFC00);
  EXPECT_EQ(F32ToF16(std::bit_cast<float>(0x7F800001u)), 0x7E00);  // signalling NaN quieted
  EXPECT_EQ(F32ToF16(std::bit_cast<float>(0xFFFFE000u)), 0xFFFF);  // payload kept
  EXPECT_EQ(std::bit_cast<uint32_t>(6.1e-5f), 0x387FDA40u);
  EXPECT_EQ(std::bit_cast<uint32_t>(1e-10f), 0x2EDBE6FFu);
}

TEST(CodecExamples, Fp8ToBf16) {  // §9.3, §9.4
  const std::vector<uint8_t> bytes = Hex("00 38 40 7e c4 01 08 fe");
  const float values[] = {0.0f, 1.0f, 2.0f, 448.0f, -3.0f, std::ldexp(1.0f, -9), std::ldexp(1.0f, -6), -448.0f};
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(E4m3ToF32(bytes[i]), values[i]) << i;
  EXPECT_TRUE(std::isnan(E4m3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(E4m3ToF32(0xFF)));
  const uint16_t expected[] = {0x0000, 0x3c4a, 0x3cca, 0x40b0, 0xbd17, 0x37ca, 0x394a, 0xc0b0};
  for (Isa isa : AvailableIsas()) {
    std::vector<uint16_t> out(bytes.size());
    Kernels(isa).e4m3_scaled_to_bf16(bytes.data(), bytes.size(), 0.0123f, out.data());
    for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(out[i], expected[i]) << IsaName(isa) << " byte " << i;
  }
}

}  // namespace
}  // namespace aprfs::codec
