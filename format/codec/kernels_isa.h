#pragma once

// The per-instruction-set tables behind kernels.h. Each lives in its own file; the SIMD ones
// mark their functions __attribute__((target(...))) so that the rest of the build stays
// baseline x86-64 and runs anywhere.

#include "format/codec/kernels.h"

namespace aprfs::codec {

const CodecKernels& ScalarKernels();
#if defined(__x86_64__)
const CodecKernels& Avx2Kernels();
const CodecKernels& Avx512Kernels();
#endif

}  // namespace aprfs::codec
