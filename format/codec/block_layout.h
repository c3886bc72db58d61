#pragma once

// Byte layouts shared by the reference encoders and the SIMD kernels: block sizes and the
// packing of the GGML Q4_K scales (apr-quantization.md §5.3–§5.5).

#include <cstddef>
#include <cstdint>

namespace aprfs::codec {

inline constexpr size_t kSuperBlock = 256;     // elements of a Q4_K / Q6_K super-block
inline constexpr size_t kQ4kBlockBytes = 144;
inline constexpr size_t kQ6kBlockBytes = 210;
inline constexpr size_t kAprQ4Block = 32;      // elements of an AprQ4 block
inline constexpr size_t kAprQ4BlockBytes = 18;

inline void StoreLe16(uint8_t* out, uint16_t v) {
  out[0] = static_cast<uint8_t>(v);
  out[1] = static_cast<uint8_t>(v >> 8);
}

inline void StoreLe32(uint8_t* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The 12 bytes of 6-bit scales `sc` and mins `m` of a Q4_K block (§5.4.1; the inverse of
// GGML's get_scale_min_k4).
inline void PackQ4kScales(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int i = 0; i < 4; ++i) {
    out[i] = static_cast<uint8_t>((sc[i] & 63) | ((sc[i + 4] & 0x30) << 2));
    out[i + 4] = static_cast<uint8_t>((m[i] & 63) | ((m[i + 4] & 0x30) << 2));
    out[i + 8] = static_cast<uint8_t>((sc[i + 4] & 0x0F) | ((m[i + 4] & 0x0F) << 4));
  }
}

}  // namespace aprfs::codec
