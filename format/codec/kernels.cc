#include <cassert>

#include "format/codec/kernels_isa.h"

namespace aprfs::codec {
namespace {

Isa DetectBestIsa() {
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XGETBV).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return Isa::kAvx2;
#endif
  return Isa::kScalar;
}

}  // namespace

Isa BestIsa() {
  static const Isa best = DetectBestIsa();
  return best;
}

bool IsaAvailable(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(BestIsa()); }

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

const CodecKernels& Kernels(Isa isa) {
  assert(IsaAvailable(isa));
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512: return Avx512Kernels();
    case Isa::kAvx2: return Avx2Kernels();
#endif
    default: return ScalarKernels();
  }
}

const CodecKernels& BestKernels() { return Kernels(BestIsa()); }

}  // namespace aprfs::codec
