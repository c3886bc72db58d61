#pragma once

// The per-instruction-set tables behind kernels.h. Each lives in its own file; the SIMD ones
// mark their functions __attribute__((target(...))) so that the rest of the build stays
// baseline x86-64 and runs anywhere.

#include "format/codec/block_layout.h"
#include "format/codec/ggml_quants.h"
#include "format/codec/kernels.h"
#include "format/codec/reference.h"

namespace aprfs::codec {

// A bulk Q4_K / Q6_K kernel from a one-super-block encoder.
template <void (*kEncodeBlock)(const float* x, uint8_t* out), size_t kBlockBytes>
void EachSuperBlock(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) kEncodeBlock(x + b * kSuperBlock, out + b * kBlockBytes);
}

// The apr_q4 kernel from an encoder of 8 full AprQ4 blocks (256 elements); what is left (up to
// 7 full blocks and a short one) goes to the reference.
template <void (*kEncodeEightBlocks)(const float* x, uint8_t* out)>
void AprQ4ByEightBlocks(const float* x, size_t n, uint8_t* out) {
  constexpr size_t kEight = 8 * kAprQ4Block;
  size_t i = 0;
  for (; i + kEight <= n; i += kEight) kEncodeEightBlocks(x + i, out + i / kAprQ4Block * kAprQ4BlockBytes);
  EncodeAprQ4Ref(x + i, n - i, out + i / kAprQ4Block * kAprQ4BlockBytes);
}

const CodecKernels& ScalarKernels();
#if defined(__x86_64__)
const CodecKernels& Avx2Kernels();
const CodecKernels& Avx512Kernels();
// ggml's quantizers on AVX2 (ggml_quants_avx2.cc): Q8_0, and the K-quants with their sub-block
// fits on 8 lanes.
void GgmlQ8_0BlocksAvx2(const float* x, size_t blocks, uint8_t* out);
void GgmlQ4KBlocksAvx2(const float* x, size_t blocks, uint8_t* out);
void GgmlQ5KBlocksAvx2(const float* x, size_t blocks, uint8_t* out);
void GgmlQ6KBlocksAvx2(const float* x, size_t blocks, uint8_t* out);
#endif

}  // namespace aprfs::codec
