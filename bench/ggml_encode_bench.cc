// Single-thread throughput of the GGUF views' ggml encoders as a view runs them (TensorCodec:
// BF16 source widened, rounded to f16 as llama-quantize reads the converter's F16 file (all
// but Q8_0, which the Q8_0 view encodes from the source values), then encoded block by block; with the scalar kernels and with the best instruction set's, whose
// K-quant fits run one sub-block per lane), against ggml's own quantize_row_*_ref from a libggml-base.so (the
// one node-llama-cpp ships: llama-quantize's code without an importance matrix) on the same
// f32 values, in one run. Weights: N(0, 0.02) rounded to BF16. Figures are MB/s of BF16 source
// per second of this thread's CPU time (per core, immune to a shared machine's other load),
// median of several runs, the two implementations taking turns within each run.
// Usage: build/bench/ggml_encode_bench [libggml-base.so] [MiB of BF16, default 16] [runs, 5]
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "format/codec/block_layout.h"
#include "format/codec/half.h"
#include "format/codec/kernels.h"
#include "format/codec/reference.h"
#include "format/codec/tensor_codec.h"

namespace {

using aprfs::Encoding;
using aprfs::TensorCodec;

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* lib = argc > 1 ? argv[1] : nullptr;
  const size_t mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 16;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 5;
  const size_t row = 4096;  // a typical hidden size: the codec's unit of work per row piece
  const size_t n = mib * (1u << 20) / 2 / row * row;
  std::vector<uint8_t> bf16(2 * n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (size_t i = 0; i < n; ++i) {
    aprfs::codec::StoreLe16(bf16.data() + 2 * i, aprfs::codec::F32ToBf16(normal(rng)));
  }
  std::vector<float> f32(n);
  aprfs::codec::WidenBf16Ref(bf16.data(), n, f32.data());
  void* handle = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (lib && !handle) std::fprintf(stderr, "%s\n", dlerror());
  using RowQuantizer = void (*)(const float*, void*, int64_t);

  struct Format {
    const char* name;
    Encoding encoding;
    const char* ggml_symbol;
  };
  const Format formats[] = {{"Q8_0", Encoding::kGgmlQ8_0, "quantize_row_q8_0_ref"},
                            {"Q5_0", Encoding::kGgmlQ5_0, "quantize_row_q5_0_ref"},
                            {"Q4_K", Encoding::kGgmlQ4K, "quantize_row_q4_K_ref"},
                            {"Q5_K", Encoding::kGgmlQ5K, "quantize_row_q5_K_ref"},
                            {"Q6_K", Encoding::kGgmlQ6K, "quantize_row_q6_K_ref"}};
  std::printf("%zu MiB of BF16 (%zu weights), rows of %zu, median of %d runs, MB/s of BF16 per "
              "core; aprfs's view codec with its scalar kernels and with the best (%s)\n\n"
              "| format | aprfs scalar | aprfs %s | ggml ref | scalar / ggml | %s / ggml |\n"
              "|---|---|---|---|---|---|\n",
              mib, n, row, runs, std::string(aprfs::codec::IsaName(aprfs::codec::BestIsa())).c_str(),
              std::string(aprfs::codec::IsaName(aprfs::codec::BestIsa())).c_str(),
              std::string(aprfs::codec::IsaName(aprfs::codec::BestIsa())).c_str());
  const auto& best = aprfs::codec::BestKernels();
  const auto& scalar = aprfs::codec::Kernels(aprfs::codec::Isa::kScalar);
  for (const Format& f : formats) {
    TensorCodec codec;
    codec.from = aprfs::SourceDtype::kBF16;
    codec.to = f.encoding;
    codec.cols = row;
    // Q8_0 is the NAME.Q8_0.gguf view's (from the source values); the others come in the
    // Q4_K_M view, which rounds to f16 first.
    codec.round_to_f16 = f.encoding != Encoding::kGgmlQ8_0;
    std::vector<uint8_t> out(aprfs::EncodedSize(codec) * (n / row));
    std::vector<float> values(row), scratch;
    auto ours = [&](const aprfs::codec::CodecKernels& kernels) {
      const uint64_t bytes = aprfs::EncodedSize(codec);
      for (size_t r = 0; r < n / row; ++r) {
        aprfs::ElementRange range{0, row};
        aprfs::DecodeElements(codec, kernels, range, bf16.data() + 2 * r * row, nullptr,
                              values.data());
        aprfs::EncodeUnits(codec, kernels, 0, aprfs::UnitCount(codec), values.data(), 0.0f,
                           scratch, out.data() + r * bytes);
      }
    };
    auto ggml = handle ? reinterpret_cast<RowQuantizer>(dlsym(handle, f.ggml_symbol)) : nullptr;
    std::vector<double> scalar_s, ours_s, ggml_s;
    for (int r = 0; r < runs; ++r) {
      double start = ThreadCpuSeconds();
      ours(scalar);
      scalar_s.push_back(ThreadCpuSeconds() - start);
      start = ThreadCpuSeconds();
      ours(best);
      ours_s.push_back(ThreadCpuSeconds() - start);
      if (ggml) {
        start = ThreadCpuSeconds();
        ggml(f32.data(), out.data(), static_cast<int64_t>(n));
        ggml_s.push_back(ThreadCpuSeconds() - start);
      }
    }
    const double mb = 2.0 * n / 1e6;
    const double sc = mb / Median(scalar_s), a = mb / Median(ours_s);
    if (ggml) {
      const double g = mb / Median(ggml_s);
      std::printf("| %s | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", f.name, sc, a, g, sc / g, a / g);
    } else {
      std::printf("| %s | %.0f | %.0f | - | - | - |\n", f.name, sc, a);
    }
  }
  return 0;
}
