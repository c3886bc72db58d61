// The scalar kernels: the reference encoders, block after block. Used where AVX2 is absent,
// and as the yardstick of the SIMD kernels.
#include "format/codec/block_layout.h"
#include "format/codec/kernels_isa.h"
#include "format/codec/reference.h"

namespace aprfs::codec {
namespace {

void EachGgmlQ8_0Block(const float* x, size_t blocks, uint8_t* out) {
  for (size_t b = 0; b < blocks; ++b) EncodeGgmlQ8_0BlockRef(x + 32 * b, out + kGgmlQ8_0Bytes * b);
}

constexpr CodecKernels kScalar = {
    .widen_bf16 = WidenBf16Ref,
    .widen_f16 = WidenF16Ref,
    .e4m3_scaled_to_bf16 = E4m3ScaledToBf16Ref,
    .q4k_blocks = EachSuperBlock<EncodeQ4kBlockRef, kQ4kBlockBytes>,
    .q6k_blocks = EachSuperBlock<EncodeQ6kBlockRef, kQ6kBlockBytes>,
    .ggml_q8_0_blocks = EachGgmlQ8_0Block,
    .ggml_q4k_blocks = EachSuperBlock<EncodeGgmlQ4KBlockRef, kGgmlQ4KBytes>,
    .ggml_q5k_blocks = EachSuperBlock<EncodeGgmlQ5KBlockRef, kGgmlQ5KBytes>,
    .ggml_q6k_blocks = EachSuperBlock<EncodeGgmlQ6KBlockRef, kGgmlQ6KBytes>,
    .apr_q4 = EncodeAprQ4Ref,
    .max_abs = MaxAbsRef,
    .apr_q8 = EncodeAprQ8Ref,
    .f16 = EncodeF16Ref,
};

}  // namespace

const CodecKernels& ScalarKernels() { return kScalar; }

}  // namespace aprfs::codec
