// Every SIMD kernel table this CPU can run gives exactly the scalar (reference) bytes, on many
// random blocks of every kind the spec worries about (apr-quantization.md §0.2): typical
// weights, one-signed, constant, tiny ranges, exact .5 ties, signed zeros, subnormals, and
// arbitrary bit patterns (NaN, ±Inf, huge); odd lengths for the element-wise kernels.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "format/codec/block_layout.h"
#include "format/codec/ggml_quants.h"
#include "format/codec/kernels.h"
#include "format/codec/reference.h"
#include "tests/unit/codec_test_util.h"

namespace aprfs::codec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kBlocksPerFamily = 3000;

enum class Family {
  kTypical, kBf16Weights, kPositive, kNegative, kConstant, kTinyRange, kTies, kSignedZeros,
  kSubnormals, kArbitraryBits, kSprinkledSpecials, kWideExponents, kCount
};

// One 256-element block of a family.
void FillBlock(Family family, std::mt19937_64& rng, float* x) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  auto bits = [&] { return std::bit_cast<float>(static_cast<uint32_t>(rng())); };
  auto pick = [&](std::initializer_list<float> values) { return values.begin()[rng() % values.size()]; };
  switch (family) {
    case Family::kTypical:
      for (int i = 0; i < 256; ++i) x[i] = normal(rng);
      break;
    case Family::kBf16Weights:  // what a BF16 checkpoint widens to
      for (int i = 0; i < 256; ++i) x[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(normal(rng)) & 0xFFFF0000u);
      break;
    case Family::kPositive:
    case Family::kNegative: {
      const float sign = family == Family::kPositive ? 1.0f : -1.0f;
      const float base = unit(rng) * pick({0.0f, 1e-3f, 1.0f, 100.0f});
      for (int i = 0; i < 256; ++i) x[i] = sign * (base + unit(rng) * pick({1e-6f, 0.01f, 1.0f}));
      break;
    }
    case Family::kConstant: {
      const float v = pick({normal(rng), 0.0f, -0.0f, 1.0f, -3.5f, 6.1e-5f, 1e-30f, 65504.0f, 1e30f});
      for (int i = 0; i < 256; ++i) x[i] = v;
      break;
    }
    case Family::kTinyRange: {  // ranges around F16_MIN_NORMAL and EPS: the floors of §5.4.2/§5.5
      const float base = pick({0.0f, 1e-4f, -1e-4f, 0.5f, -2.0f});
      const float width = pick({1e-12f, 1e-10f, 6.0e-5f, 6.1e-5f, 6.2e-5f, 9.2e-4f, 1e-3f, 2e-3f});
      for (int i = 0; i < 256; ++i) x[i] = base + width * unit(rng);
      break;
    }
    case Family::kTies: {  // small multiples of a power of two: quotients hit exact .5 often
      const float step = std::ldexp(1.0f, static_cast<int>(rng() % 12) - 8);
      const int span = static_cast<int>(pick({8.0f, 16.0f, 31.0f, 64.0f, 127.0f, 255.0f}));
      for (int i = 0; i < 256; ++i) x[i] = step * (static_cast<int>(rng() % (2 * span + 1)) - span) * 0.5f;
      break;
    }
    case Family::kSignedZeros:
      for (int i = 0; i < 256; ++i) x[i] = rng() % 4 == 0 ? normal(rng) : pick({0.0f, -0.0f});
      break;
    case Family::kSubnormals:
      for (int i = 0; i < 256; ++i) {
        const uint32_t sign = static_cast<uint32_t>(rng() & 1) << 31;
        x[i] = rng() % 8 == 0 ? pick({0.0f, -0.0f, 1e-38f, -1.2e-38f})
                              : std::bit_cast<float>(sign | static_cast<uint32_t>(rng() % 0x800000));
      }
      break;
    case Family::kArbitraryBits:
      for (int i = 0; i < 256; ++i) x[i] = bits();
      break;
    case Family::kSprinkledSpecials: {
      for (int i = 0; i < 256; ++i) x[i] = normal(rng);
      const int count = static_cast<int>(rng() % 6) + 1;
      for (int k = 0; k < count; ++k) {
        x[rng() % 256] = pick({std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                               std::bit_cast<float>(0x7F800001u), kInf, -kInf, 3.4e38f, -3.4e38f, -0.0f, 1e-45f,
                               65520.0f, bits()});
      }
      break;
    }
    case Family::kWideExponents:
      for (int i = 0; i < 256; ++i) x[i] = std::ldexp(normal(rng), static_cast<int>(rng() % 80) - 40);
      break;
    case Family::kCount:
      break;
  }
}

// kBlocksPerFamily blocks of every family, interleaved, fixed seed.
const std::vector<float>& Blocks() {
  static const std::vector<float> blocks = [] {
    constexpr size_t kFamilies = static_cast<size_t>(Family::kCount);
    std::vector<float> v(kFamilies * kBlocksPerFamily * kSuperBlock);
    std::mt19937_64 rng(20261122);
    for (size_t b = 0; b < kFamilies * kBlocksPerFamily; ++b) {
      FillBlock(static_cast<Family>(b % kFamilies), rng, v.data() + b * kSuperBlock);
    }
    return v;
  }();
  return blocks;
}

std::vector<Isa> SimdIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (IsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

const CodecKernels& Scalar() { return Kernels(Isa::kScalar); }

// The first differing block of two encodings, spelled out with its input.
template <typename T>
std::string FirstDifference(const std::vector<T>& want, const std::vector<T>& got, size_t unit,
                            const float* input = nullptr, size_t input_unit = 0) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == got[i]) continue;
    const size_t b = i / unit;
    std::string s = "first difference at element " + std::to_string(i) + " (unit " + std::to_string(b) + ")";
    if (sizeof(T) == 1) {
      s += "\n want " + testing::ToHex(reinterpret_cast<const uint8_t*>(want.data()) + b * unit, unit);
      s += "\n got  " + testing::ToHex(reinterpret_cast<const uint8_t*>(got.data()) + b * unit, unit);
    }
    if (input != nullptr) {
      s += "\n input bits";
      for (size_t k = 0; k < input_unit; ++k) {
        char buf[16];
        std::snprintf(buf, sizeof buf, " %08x", std::bit_cast<uint32_t>(input[b * input_unit + k]));
        s += buf;
      }
    }
    return s;
  }
  return want.size() == got.size() ? "" : "sizes differ";
}

TEST(CodecKernels, BestIsaIsAvailable) {
  EXPECT_TRUE(IsaAvailable(Isa::kScalar));
  EXPECT_TRUE(IsaAvailable(BestIsa()));
  EXPECT_EQ(&BestKernels(), &Kernels(BestIsa()));
  EXPECT_EQ(IsaName(Isa::kAvx512), "avx512");
}

// All of Blocks() through a Q4_K / Q6_K kernel of every SIMD table, against the scalar one.
void ExpectSuperBlocksEqual(void (*CodecKernels::*kernel)(const float*, size_t, uint8_t*), size_t block_bytes) {
  const std::vector<float>& x = Blocks();
  const size_t blocks = x.size() / kSuperBlock;
  std::vector<uint8_t> want(blocks * block_bytes);
  (Scalar().*kernel)(x.data(), blocks, want.data());
  for (Isa isa : SimdIsas()) {
    std::vector<uint8_t> got(want.size());
    (Kernels(isa).*kernel)(x.data(), blocks, got.data());
    EXPECT_EQ(FirstDifference(want, got, block_bytes, x.data(), kSuperBlock), "") << IsaName(isa);
  }
}

TEST(CodecKernels, Q4kSimdEqualsScalar) { ExpectSuperBlocksEqual(&CodecKernels::q4k_blocks, kQ4kBlockBytes); }
TEST(CodecKernels, Q6kSimdEqualsScalar) { ExpectSuperBlocksEqual(&CodecKernels::q6k_blocks, kQ6kBlockBytes); }
TEST(CodecKernels, GgmlQ8_0SimdEqualsScalar) {
  // 8 blocks of 32 per 256-element "super-block" of the families.
  const std::vector<float>& x = Blocks();
  const size_t blocks = x.size() / 32;
  std::vector<uint8_t> want(blocks * kGgmlQ8_0Bytes);
  Scalar().ggml_q8_0_blocks(x.data(), blocks, want.data());
  for (Isa isa : SimdIsas()) {
    SCOPED_TRACE(IsaName(isa));
    std::vector<uint8_t> got(want.size());
    Kernels(isa).ggml_q8_0_blocks(x.data(), blocks, got.data());
    EXPECT_EQ(FirstDifference(want, got, kGgmlQ8_0Bytes, x.data(), 32), "");
  }
}
TEST(CodecKernels, GgmlQ4kSimdEqualsScalar) {
  ExpectSuperBlocksEqual(&CodecKernels::ggml_q4k_blocks, kGgmlQ4KBytes);
}
TEST(CodecKernels, GgmlQ5kSimdEqualsScalar) {
  ExpectSuperBlocksEqual(&CodecKernels::ggml_q5k_blocks, kGgmlQ5KBytes);
}
TEST(CodecKernels, GgmlQ6kSimdEqualsScalar) {
  ExpectSuperBlocksEqual(&CodecKernels::ggml_q6k_blocks, kGgmlQ6KBytes);
}

// Odd lengths at odd offsets: (offset, n) pairs over Blocks(), plus the whole buffer less a few.
std::vector<std::pair<size_t, size_t>> Slices() {
  std::vector<std::pair<size_t, size_t>> slices;
  std::mt19937_64 rng(7);
  const size_t total = Blocks().size();
  for (size_t n = 0; n <= 300; ++n) slices.emplace_back(rng() % 1000, n);
  for (int k = 0; k < 200; ++k) slices.emplace_back(rng() % (total / 2), rng() % 5000);
  slices.emplace_back(3, total - 8);
  return slices;
}

TEST(CodecKernels, AprQ4SimdEqualsScalar) {
  const std::vector<float>& x = Blocks();
  for (auto [offset, n] : Slices()) {
    std::vector<uint8_t> want((n + 31) / 32 * kAprQ4BlockBytes);
    Scalar().apr_q4(x.data() + offset, n, want.data());
    for (Isa isa : SimdIsas()) {
      std::vector<uint8_t> got(want.size());
      Kernels(isa).apr_q4(x.data() + offset, n, got.data());
      ASSERT_EQ(FirstDifference(want, got, kAprQ4BlockBytes, x.data() + offset, kAprQ4Block), "")
          << IsaName(isa) << " offset " << offset << " n " << n;
    }
  }
}

TEST(CodecKernels, MaxAbsSimdEqualsScalar) {
  const std::vector<float>& x = Blocks();
  const float accs[] = {0.0f, -0.0f, 0.01f, 1e30f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
  for (auto [offset, n] : Slices()) {
    for (float acc : accs) {
      const uint32_t want = std::bit_cast<uint32_t>(Scalar().max_abs(x.data() + offset, n, acc));
      for (Isa isa : SimdIsas()) {
        ASSERT_EQ(std::bit_cast<uint32_t>(Kernels(isa).max_abs(x.data() + offset, n, acc)), want)
            << IsaName(isa) << " offset " << offset << " n " << n << " acc " << acc;
      }
    }
  }
  // All NaN, starting from a NaN accumulator: the fold keeps the last element's |NaN|.
  const std::vector<float> nans(100, -std::numeric_limits<float>::quiet_NaN());
  for (Isa isa : SimdIsas()) {
    EXPECT_EQ(std::bit_cast<uint32_t>(Kernels(isa).max_abs(nans.data(), nans.size(), std::nanf("1"))),
              std::bit_cast<uint32_t>(Scalar().max_abs(nans.data(), nans.size(), std::nanf("1"))));
  }
}

TEST(CodecKernels, AprQ8SimdEqualsScalar) {
  const std::vector<float>& x = Blocks();
  std::mt19937_64 rng(11);
  for (auto [offset, n] : Slices()) {
    const float own = AprQ8Scale(Scalar().max_abs(x.data() + offset, n, 0.0f));
    const float odd[] = {0.0f, -0.0f, -0.5f, 1e-40f, kInf, std::numeric_limits<float>::quiet_NaN(), 3e38f,
                         std::bit_cast<float>(static_cast<uint32_t>(rng()))};
    for (float scale : {own, odd[rng() % 8]}) {
      std::vector<uint8_t> want(n);
      Scalar().apr_q8(x.data() + offset, n, scale, want.data());
      for (Isa isa : SimdIsas()) {
        std::vector<uint8_t> got(n);
        Kernels(isa).apr_q8(x.data() + offset, n, scale, got.data());
        ASSERT_EQ(FirstDifference(want, got, 1, x.data() + offset, 1), "")
            << IsaName(isa) << " offset " << offset << " n " << n << " scale " << scale;
      }
    }
  }
}

TEST(CodecKernels, F16SimdEqualsScalar) {
  const std::vector<float>& x = Blocks();
  for (auto [offset, n] : Slices()) {
    std::vector<uint8_t> want(2 * n);
    Scalar().f16(x.data() + offset, n, want.data());
    for (Isa isa : SimdIsas()) {
      std::vector<uint8_t> got(2 * n);
      Kernels(isa).f16(x.data() + offset, n, got.data());
      ASSERT_EQ(FirstDifference(want, got, 2, x.data() + offset, 1), "")
          << IsaName(isa) << " offset " << offset << " n " << n;
    }
  }
}

// Every 16-bit pattern, then odd lengths at odd offsets of that buffer.
void ExpectWideningEqual(void (*CodecKernels::*kernel)(const uint8_t*, size_t, float*)) {
  std::vector<uint8_t> src(2 * 65536 + 64);
  for (uint32_t h = 0; h < 65536; ++h) StoreLe16(src.data() + 2 * h, static_cast<uint16_t>(h));
  for (size_t i = 2 * 65536; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 37);
  std::vector<std::pair<size_t, size_t>> slices = {{0, 65536 + 32}};
  for (size_t n = 0; n < 70; ++n) slices.emplace_back(2 * (n * 977 % 60000) + 1, n);
  for (auto [byte_offset, n] : slices) {
    std::vector<uint32_t> want(n);
    (Scalar().*kernel)(src.data() + byte_offset, n, reinterpret_cast<float*>(want.data()));
    for (Isa isa : SimdIsas()) {
      std::vector<uint32_t> got(n);
      (Kernels(isa).*kernel)(src.data() + byte_offset, n, reinterpret_cast<float*>(got.data()));
      ASSERT_EQ(FirstDifference(want, got, 1), "") << IsaName(isa) << " byte offset " << byte_offset << " n " << n;
    }
  }
}

TEST(CodecKernels, WidenBf16SimdEqualsScalarForEveryValue) { ExpectWideningEqual(&CodecKernels::widen_bf16); }
TEST(CodecKernels, WidenF16SimdEqualsScalarForEveryValue) { ExpectWideningEqual(&CodecKernels::widen_f16); }

TEST(CodecKernels, E4m3ScaledToBf16SimdEqualsScalar) {
  std::vector<uint8_t> src(256 * 3 + 5);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i);
  const float scales[] = {1.0f, 0.0123f, 1.7e-4f, 0.0f, -0.0f, -2.5f, 1e38f, 3.4e38f, 1e-40f, 0x1p-140f,
                          kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0xFF812345u),
                          std::bit_cast<float>(0x7F800001u)};
  for (float scale : scales) {
    for (size_t n : {src.size(), size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{255}}) {
      for (size_t offset : {size_t{0}, size_t{3}}) {
        if (offset + n > src.size()) continue;
        std::vector<uint16_t> want(n);
        Scalar().e4m3_scaled_to_bf16(src.data() + offset, n, scale, want.data());
        for (Isa isa : SimdIsas()) {
          std::vector<uint16_t> got(n);
          Kernels(isa).e4m3_scaled_to_bf16(src.data() + offset, n, scale, got.data());
          ASSERT_EQ(FirstDifference(want, got, 1), "") << IsaName(isa) << " scale " << scale << " n " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace aprfs::codec
