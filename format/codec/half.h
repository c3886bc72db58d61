#pragma once

// Scalar conversions between f32 and the 16- and 8-bit float formats the codecs read or write
// (apr-quantization.md §3.1, §4.4, §9.3, §9.4). Bit-exact; no dependence on the FPU's modes.

#include <cstdint>

namespace aprfs::codec {

// IEEE binary32 -> binary16, round to nearest even, subnormals kept, overflow -> ±Inf, NaN quieted
// with its top payload bits kept (§4.4; the `half` crate, x86 F16C with imm rounding 0).
uint16_t F32ToF16(float x);

// IEEE binary16 -> binary32, exact (normals, subnormals, ±0, ±Inf); a NaN keeps its sign and
// its payload shifted left by 13, not quieted (§3.1).
float F16ToF32(uint16_t h);

// bfloat16 -> binary32: the upper half of the f32 bits (exact).
float Bf16ToF32(uint16_t b);

// binary32 -> bfloat16, round to nearest even, subnormals kept; NaN -> (bits >> 16) | 0x0040 (§9.4).
uint16_t F32ToBf16(float x);

// FP8 E4M3FN (torch.float8_e4m3fn) -> binary32, exact (§9.3). 0x7F and 0xFF are NaN (quiet,
// with the byte's sign); there are no infinities.
float E4m3ToF32(uint8_t b);

}  // namespace aprfs::codec
