#include "format/codec/kernels_isa.h"
namespace aprfs::codec {
const CodecKernels& Avx512Kernels() { return ScalarKernels(); }
}  // namespace aprfs::codec
