// Single-thread throughput of the codec kernels (format/codec/kernels.h), for every instruction
// set this CPU has, over realistic random weights: N(0, 0.02) rounded to BF16, 64 MiB of BF16
// source by default. Figures are GB/s of *source consumed* (BF16 bytes for the "widen_bf16 + X"
// pipelines, which widen 4096 elements into an L1-resident buffer and encode them, as the read
// path does; f32 bytes for an encoder run alone) per second of this thread's CPU time (so time
// spent descheduled on a shared machine does not count: the figures are per core), median of
// several runs, and the ratio to the scalar kernels measured in the same run (the tables take
// turns within each run).
// Usage: build/bench/encode_bench [MiB of BF16 source, default 64] [runs, default 5]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "format/codec/block_layout.h"
#include "format/codec/half.h"
#include "format/codec/kernels.h"
#include "format/codec/reference.h"

namespace {

using aprfs::codec::CodecKernels;
using aprfs::codec::Isa;

constexpr size_t kChunk = 4096;  // elements widened then encoded at a time (16 super-blocks)

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

struct Inputs {
  size_t n = 0;                   // elements
  std::vector<uint8_t> bf16;      // 2n bytes
  std::vector<uint8_t> f16;       // the same weights as F16, 2n bytes
  std::vector<uint8_t> e4m3;      // n FP8 bytes (no NaN)
  std::vector<float> f32;         // the BF16 weights widened
};

Inputs MakeInputs(size_t mib) {
  Inputs in;
  in.n = mib * (1u << 20) / 2 / aprfs::codec::kSuperBlock * aprfs::codec::kSuperBlock;
  in.bf16.resize(2 * in.n);
  in.f16.resize(2 * in.n);
  in.e4m3.resize(in.n);
  in.f32.resize(in.n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (size_t i = 0; i < in.n; ++i) {
    const float w = normal(rng);
    aprfs::codec::StoreLe16(in.bf16.data() + 2 * i, aprfs::codec::F32ToBf16(w));
    aprfs::codec::StoreLe16(in.f16.data() + 2 * i, aprfs::codec::F32ToF16(w));
    uint8_t b = static_cast<uint8_t>(rng());
    in.e4m3[i] = (b & 0x7F) == 0x7F ? b ^ 1 : b;
  }
  aprfs::codec::WidenBf16Ref(in.bf16.data(), in.n, in.f32.data());
  return in;
}

struct Measure {
  std::string name;
  std::string source;  // what the GB/s counts
  size_t source_bytes;
  std::function<void(const CodecKernels&)> run;
};

// Median seconds of `runs` runs per kernel table. The tables take turns within each run, so a
// change of load on the (shared) machine hits them all alike and the ratios stay fair.
std::vector<double> MedianSeconds(const Measure& m, const std::vector<const CodecKernels*>& tables, int runs) {
  std::vector<std::vector<double>> seconds(tables.size());
  for (int r = 0; r < runs; ++r) {
    for (size_t t = 0; t < tables.size(); ++t) {
      const double start = ThreadCpuSeconds();
      m.run(*tables[t]);
      seconds[t].push_back(ThreadCpuSeconds() - start);
    }
  }
  std::vector<double> medians;
  for (auto& s : seconds) {
    std::sort(s.begin(), s.end());
    medians.push_back(s[s.size() / 2]);
  }
  return medians;
}

// widen_bf16 then `encode` chunk by chunk, as the read path does for a BF16 source.
void WidenThen(const CodecKernels& k, const Inputs& in, std::vector<float>& chunk,
               const std::function<void(const float*, size_t, size_t)>& encode) {
  for (size_t i = 0; i < in.n; i += kChunk) {
    const size_t len = std::min(kChunk, in.n - i);
    k.widen_bf16(in.bf16.data() + 2 * i, len, chunk.data());
    encode(chunk.data(), len, i);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace aprfs::codec;
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const Inputs in = MakeInputs(mib);
  const size_t n = in.n;
  std::vector<float> out_f32(n);
  std::vector<uint8_t> out(4 * n);
  std::vector<float> chunk(kChunk);
  const float q8_scale = AprQ8Scale(MaxAbsRef(in.f32.data(), n, 0.0f));
  volatile float sink = 0;

  const std::vector<Measure> measures = {
      {"widen_bf16", "bf16", 2 * n, [&](const CodecKernels& k) { k.widen_bf16(in.bf16.data(), n, out_f32.data()); }},
      {"widen_f16", "f16", 2 * n, [&](const CodecKernels& k) { k.widen_f16(in.f16.data(), n, out_f32.data()); }},
      {"e4m3_scaled_to_bf16", "fp8", n,
       [&](const CodecKernels& k) {
         k.e4m3_scaled_to_bf16(in.e4m3.data(), n, 0.0123f, reinterpret_cast<uint16_t*>(out.data()));
       }},
      {"q4k", "f32", 4 * n, [&](const CodecKernels& k) { k.q4k_blocks(in.f32.data(), n / kSuperBlock, out.data()); }},
      {"widen_bf16 + q4k", "bf16", 2 * n,
       [&](const CodecKernels& k) {
         WidenThen(k, in, chunk, [&](const float* x, size_t len, size_t i) {
           k.q4k_blocks(x, len / kSuperBlock, out.data() + i / kSuperBlock * kQ4kBlockBytes);
         });
       }},
      {"q6k", "f32", 4 * n, [&](const CodecKernels& k) { k.q6k_blocks(in.f32.data(), n / kSuperBlock, out.data()); }},
      {"widen_bf16 + q6k", "bf16", 2 * n,
       [&](const CodecKernels& k) {
         WidenThen(k, in, chunk, [&](const float* x, size_t len, size_t i) {
           k.q6k_blocks(x, len / kSuperBlock, out.data() + i / kSuperBlock * kQ6kBlockBytes);
         });
       }},
      {"apr_q4", "f32", 4 * n, [&](const CodecKernels& k) { k.apr_q4(in.f32.data(), n, out.data()); }},
      {"widen_bf16 + apr_q4", "bf16", 2 * n,
       [&](const CodecKernels& k) {
         WidenThen(k, in, chunk, [&](const float* x, size_t len, size_t i) {
           k.apr_q4(x, len, out.data() + i / kAprQ4Block * kAprQ4BlockBytes);
         });
       }},
      {"max_abs", "f32", 4 * n, [&](const CodecKernels& k) { sink = k.max_abs(in.f32.data(), n, 0.0f); }},
      {"apr_q8", "f32", 4 * n, [&](const CodecKernels& k) { k.apr_q8(in.f32.data(), n, q8_scale, out.data()); }},
      {"widen_bf16 + apr_q8", "bf16", 2 * n,
       [&](const CodecKernels& k) {
         WidenThen(k, in, chunk, [&](const float* x, size_t len, size_t i) { k.apr_q8(x, len, q8_scale, out.data() + i); });
       }},
      {"f16", "f32", 4 * n, [&](const CodecKernels& k) { k.f16(in.f32.data(), n, out.data()); }},
      {"widen_bf16 + f16", "bf16", 2 * n,
       [&](const CodecKernels& k) {
         WidenThen(k, in, chunk, [&](const float* x, size_t len, size_t i) { k.f16(x, len, out.data() + 2 * i); });
       }},
  };

  std::vector<Isa> isas;
  std::vector<const CodecKernels*> tables;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaAvailable(isa)) continue;
    isas.push_back(isa);
    tables.push_back(&Kernels(isa));
  }
  std::printf("%zu elements (%zu MiB of BF16), median of %d runs, single thread; GB/s of source per CPU-second\n", n, 2 * n >> 20,
              runs);
  std::printf("%-22s %-6s", "kernel", "source");
  for (Isa isa : isas) std::printf(" %9s", std::string(IsaName(isa)).c_str());
  for (size_t i = 1; i < isas.size(); ++i) std::printf(" %10s", (std::string(IsaName(isas[i])) + "/sc").c_str());
  std::printf("\n");
  for (const Measure& m : measures) {
    std::printf("%-22s %-6s", m.name.c_str(), m.source.c_str());
    std::fflush(stdout);
    std::vector<double> gbps;
    for (double seconds : MedianSeconds(m, tables, runs)) {
      gbps.push_back(m.source_bytes / seconds / 1e9);
      std::printf(" %9.2f", gbps.back());
    }
    for (size_t i = 1; i < gbps.size(); ++i) std::printf(" %9.1fx", gbps[i] / gbps[0]);
    std::printf("\n");
  }
  (void)sink;
  return 0;
}
