// The ggml encoders of the GGUF views against ggml itself: the quantize_row_*_ref functions of
// the libggml-base.so that node-llama-cpp ships (llama.cpp's own CPU build, the one the views
// are loaded with in gguf_view_test), byte for byte, on rows shaped to reach every branch:
// Gaussian and uniform weights, bf16- and f16-rounded ones, all-zero and constant sub-blocks,
// lone outliers, tiny values near f16's subnormals, huge ones, mixed signs.
#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format/codec/ggml_quants.h"
#include "format/codec/half.h"
#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {
namespace {

using RowQuantizer = void (*)(const float* x, void* y, int64_t k);

struct Format {
  const char* symbol;
  size_t elements;
  size_t bytes;
  void (*ours)(const float* x, uint8_t* out);
};

const Format kFormats[] = {
    {"quantize_row_q8_0_ref", 32, aprfs::codec::kGgmlQ8_0Bytes, aprfs::codec::EncodeGgmlQ8_0BlockRef},
    {"quantize_row_q5_0_ref", 32, aprfs::codec::kGgmlQ5_0Bytes, aprfs::codec::EncodeGgmlQ5_0BlockRef},
    {"quantize_row_q4_K_ref", 256, aprfs::codec::kGgmlQ4KBytes, aprfs::codec::EncodeGgmlQ4KBlockRef},
    {"quantize_row_q5_K_ref", 256, aprfs::codec::kGgmlQ5KBytes, aprfs::codec::EncodeGgmlQ5KBlockRef},
    {"quantize_row_q6_K_ref", 256, aprfs::codec::kGgmlQ6KBytes, aprfs::codec::EncodeGgmlQ6KBlockRef},
};

float Bf16Round(float x) { return aprfs::codec::Bf16ToF32(aprfs::codec::F32ToBf16(x)); }
float F16Round(float x) { return aprfs::codec::F16ToF32(aprfs::codec::F32ToF16(x)); }

// Row `kind` of 512 values.
std::vector<float> Row(int kind, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.0f, 0.02f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) {
    switch (kind % 8) {
      case 0: x[i] = gauss(rng); break;
      case 1: x[i] = Bf16Round(gauss(rng)); break;
      case 2: x[i] = F16Round(uniform(rng)); break;
      case 3: x[i] = (i / 16) % 3 == 0 ? 0.0f : gauss(rng); break;            // zero groups
      case 4: x[i] = (i / 32) % 2 == 0 ? 0.125f : -gauss(rng) * 50; break;     // constants
      case 5: x[i] = i % 97 == 0 ? 3.0f : gauss(rng) * 1e-3f; break;           // outliers
      case 6: x[i] = gauss(rng) * 1e-4f; break;                                 // near subnormal
      case 7: x[i] = uniform(rng) * 6e4f; break;                                // huge
    }
  }
  return x;
}

TEST(GgmlReferenceTest, EveryEncoderGivesTheBytesOfGgmlsOwnReferenceQuantizer) {
  const std::string lib = ToolsDir() +
      "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror() << " (scripts/install-node-tools.sh installs it)";
  std::mt19937 rng(20261126);
  for (const Format& format : kFormats) {
    SCOPED_TRACE(format.symbol);
    auto ggml = reinterpret_cast<RowQuantizer>(dlsym(handle, format.symbol));
    ASSERT_NE(ggml, nullptr) << dlerror();
    size_t blocks = 0;
    for (int kind = 0; kind < 64; ++kind) {
      const std::vector<float> x = Row(kind, rng);
      const size_t n = x.size() / format.elements;
      std::vector<uint8_t> want(n * format.bytes), got(n * format.bytes);
      ggml(x.data(), want.data(), static_cast<int64_t>(x.size()));
      for (size_t b = 0; b < n; ++b) {
        format.ours(x.data() + b * format.elements, got.data() + b * format.bytes);
      }
      for (size_t b = 0; b < n; ++b) {
        ASSERT_EQ(0, std::memcmp(got.data() + b * format.bytes, want.data() + b * format.bytes,
                                 format.bytes))
            << "row kind " << kind % 8 << ", block " << b;
      }
      blocks += n;
    }
    EXPECT_GT(blocks, 0u);
  }
  dlclose(handle);
}

}  // namespace
}  // namespace aprfs_itest
