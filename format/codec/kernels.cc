#include <cassert>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "format/codec/kernels_isa.h"

namespace aprfs::codec {
namespace {

#if defined(__x86_64__)
// CPUID.1:ECX bit 29. Read directly: Clang before 16 does not know __builtin_cpu_supports("f16c").
// (F16C uses the YMM state, whose OS support the "avx2" test below already checks.)
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#endif

Isa DetectBestIsa() {
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XGETBV).
  const bool avx2 = __builtin_cpu_supports("avx2") && CpuHasF16c();
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx512;
  }
  if (avx2) return Isa::kAvx2;
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
