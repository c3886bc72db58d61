#include "format/codec/half.h"

#include <bit>
#include <cmath>

namespace aprfs::codec {

uint16_t F32ToF16(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (b >> 16) & 0x8000;
  const int32_t e = static_cast<int32_t>((b >> 23) & 0xFF);
  uint32_t m = b & 0x7FFFFF;
  if (e == 0xFF) return static_cast<uint16_t>(sign | 0x7C00 | (m != 0 ? 0x0200 | (m >> 13) : 0));
  const int32_t he = e - 127 + 15;
  if (he >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  if (he <= 0) {
    if (he < -10) return static_cast<uint16_t>(sign);
    m |= 0x800000;
    const uint32_t shift = static_cast<uint32_t>(14 - he);
    uint32_t hm = m >> shift;
    const uint32_t rb = 1u << (shift - 1);
    if ((m & rb) && (m & (3 * rb - 1))) hm += 1;  // RNE on the discarded bits
    return static_cast<uint16_t>(sign | hm);
  }
  uint32_t out = sign | (static_cast<uint32_t>(he) << 10) | (m >> 13);
  if ((m & 0x1000) && (m & 0x2FFF)) out += 1;  // a carry may run into the exponent (-> Inf)
  return static_cast<uint16_t>(out);
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F;
  uint32_t m = h & 0x3FF;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000 | (m << 13));
  if (e != 0) return std::bit_cast<float>(sign | ((e + 127 - 15) << 23) | (m << 13));
  if (m == 0) return std::bit_cast<float>(sign);
  // Subnormal: m * 2^-24, renormalized (every binary16 subnormal is a binary32 normal).
  uint32_t exponent = 127 - 15 + 1;
  while ((m & 0x400) == 0) {
    m <<= 1;
    --exponent;
  }
  return std::bit_cast<float>(sign | (exponent << 23) | ((m & 0x3FF) << 13));
}

float Bf16ToF32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t F32ToBf16(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x0040);
  return static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

float E4m3ToF32(uint8_t b) {
  const bool negative = (b & 0x80) != 0;
  const int exponent = (b >> 3) & 15;
  const int mantissa = b & 7;
  if ((b & 0x7F) == 0x7F) return negative ? -std::nanf("") : std::nanf("");
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)  // (M/8)·2^-6
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1+M/8)·2^(E-7)
  return negative ? -magnitude : magnitude;
}

}  // namespace aprfs::codec
