#pragma once

// The Rust f32 primitives the upstream encoders rely on (apr-quantization.md §4.2), spelled out
// so that the C++ reference means the same thing. C's casts and std::clamp/std::max do not:
// a float -> integer cast out of range is UB in C++ but saturates in Rust, and std::max
// propagates NaN where Rust's f32::max ignores it.

#include <cmath>
#include <cstdint>

namespace aprfs::codec {

// Binary32 constants of §4.1.
inline constexpr float kF16MinNormal = 6.1e-5f;  // bits 0x387FDA40 (trueno-quant F16_MIN_NORMAL)
inline constexpr float kEps = 1e-10f;            // bits 0x2EDBE6FF

// f32::round: nearest integer, ties away from zero (C roundf, not rintf); NaN, ±Inf pass.
inline float RustRound(float x) { return std::round(x); }

// f32::clamp: a NaN passes through (std::clamp would compare it away).
inline float RustClamp(float x, float lo, float hi) {
  if (x < lo) return lo;
  if (x > hi) return hi;
  return x;
}

// `x as u8`: saturating, NaN -> 0, otherwise truncation toward zero.
inline uint8_t RustAsU8(float x) {
  if (std::isnan(x) || x <= 0.0f) return 0;
  if (x >= 255.0f) return 255;
  return static_cast<uint8_t>(x);
}

// `x as i8`: saturating, NaN -> 0, otherwise truncation toward zero.
inline int8_t RustAsI8(float x) {
  if (std::isnan(x)) return 0;
  if (x <= -128.0f) return -128;
  if (x >= 127.0f) return 127;
  return static_cast<int8_t>(x);
}

// f32::max / f32::min (C fmaxf/fminf): a NaN operand is ignored; NaN only if both are.
// Rust leaves the sign of an equal ±0 pair unspecified (it never reaches an output byte, §4.2);
// here it is always the second operand, so the SIMD kernels can match it exactly.
inline float RustFmax(float a, float b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return a > b ? a : b;
}
inline float RustFmin(float a, float b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return a < b ? a : b;
}

}  // namespace aprfs::codec
