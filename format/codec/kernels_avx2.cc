#include "format/codec/kernels_isa.h"
namespace aprfs::codec {
const CodecKernels& Avx2Kernels() { return ScalarKernels(); }
}  // namespace aprfs::codec
