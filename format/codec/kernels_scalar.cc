// The scalar kernels: the reference encoders, block after block. Used where AVX2 is absent,
// and as the yardstick of the SIMD kernels.
#include "format/codec/block_layout.h"
#include "format/codec/kernels_isa.h"
#include "format/codec/reference.h"

namespace aprfs::codec {
namespace {

void Q4kBlocks(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) EncodeQ4kBlockRef(x + b * kSuperBlock, out + b * kQ4kBlockBytes);
}

void Q6kBlocks(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) EncodeQ6kBlockRef(x + b * kSuperBlock, out + b * kQ6kBlockBytes);
}

constexpr CodecKernels kScalar = {
    .widen_bf16 = WidenBf16Ref,
    .widen_f16 = WidenF16Ref,
    .e4m3_scaled_to_bf16 = E4m3ScaledToBf16Ref,
    .q4k_blocks = Q4kBlocks,
    .q6k_blocks = Q6kBlocks,
    .apr_q4 = EncodeAprQ4Ref,
    .max_abs = MaxAbsRef,
    .apr_q8 = EncodeAprQ8Ref,
    .f16 = EncodeF16Ref,
};

}  // namespace

const CodecKernels& ScalarKernels() { return kScalar; }

}  // namespace aprfs::codec
