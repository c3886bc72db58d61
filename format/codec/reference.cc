#include "format/codec/reference.h"

#include <algorithm>
#include <limits>

#include "format/codec/block_layout.h"
#include "format/codec/half.h"
#include "format/codec/rust_numeric.h"

namespace aprfs::codec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint16_t LoadLe16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Q(v, o, s) of §5.4.2: one 4-bit Q4_K code.
uint8_t Q4kCode(float v, float o, float s) {
  return s > kEps ? RustAsU8(RustClamp(RustRound((v + o) / s), 0.0f, 15.0f)) : 0;
}

}  // namespace

void EncodeQ4kBlockRef(const float* x, uint8_t* out) {
  float sub_scale[8];
  float sub_min[8];
  for (int j = 0; j < 8; ++j) {
    float lo = kInf;
    float hi = -kInf;
    for (int i = 0; i < 32; ++i) {
      lo = RustFmin(lo, x[32 * j + i]);
      hi = RustFmax(hi, x[32 * j + i]);
    }
    const float range = hi - lo;
    sub_scale[j] = range > kF16MinNormal ? range / 15.0f : kF16MinNormal;
    sub_min[j] = RustFmax(-lo, 0.0f);  // quirk 2: a positive minimum is clipped to 0
  }
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    max_scale = RustFmax(max_scale, sub_scale[j]);
    max_min = RustFmax(max_min, sub_min[j]);
  }
  const float d = max_scale > kF16MinNormal ? max_scale / 63.0f : kF16MinNormal;
  const float dmin = max_min > kF16MinNormal ? max_min / 63.0f : kF16MinNormal;
  uint8_t sc[8];
  uint8_t m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = std::min<uint8_t>(RustAsU8(RustRound(sub_scale[j] / d)), 63);
    m[j] = std::min<uint8_t>(RustAsU8(RustRound(sub_min[j] / dmin)), 63);
  }
  StoreLe16(out, F32ToF16(d));  // quirk 1: stored rounded, used unrounded below
  StoreLe16(out + 2, F32ToF16(dmin));
  PackQ4kScales(sc, m, out + 4);
  for (int c = 0; c < 4; ++c) {
    const float s_lo = d * sc[2 * c];
    const float o_lo = dmin * m[2 * c];
    const float s_hi = d * sc[2 * c + 1];
    const float o_hi = dmin * m[2 * c + 1];
    for (int l = 0; l < 32; ++l) {
      const uint8_t q_lo = Q4kCode(x[64 * c + l], o_lo, s_lo);
      const uint8_t q_hi = Q4kCode(x[64 * c + 32 + l], o_hi, s_hi);
      out[16 + 32 * c + l] = static_cast<uint8_t>(q_lo | (q_hi << 4));
    }
  }
}

void EncodeQ6kBlockRef(const float* x, uint8_t* out) {
  float sub_scale[16];
  for (int j = 0; j < 16; ++j) {
    float ma = 0.0f;
    for (int k = 0; k < 16; ++k) ma = RustFmax(ma, std::fabs(x[16 * j + k]));
    sub_scale[j] = ma > kF16MinNormal ? ma / 31.0f : kF16MinNormal;
  }
  float max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) max_scale = RustFmax(max_scale, sub_scale[j]);
  const float d = max_scale > kF16MinNormal ? max_scale / 127.0f : kF16MinNormal;
  int8_t sc[16];
  for (int j = 0; j < 16; ++j) sc[j] = RustAsI8(RustClamp(RustRound(sub_scale[j] / d), -127.0f, 127.0f));
  uint8_t v6[256];
  for (int j = 0; j < 16; ++j) {
    const float s = d * sc[j];
    const float inv = std::fabs(s) > kEps ? 1.0f / s : 0.0f;  // reciprocal, then multiply
    for (int k = 0; k < 16; ++k) {
      const float q = RustClamp(RustRound(x[16 * j + k] * inv), -32.0f, 31.0f);
      v6[16 * j + k] = static_cast<uint8_t>(RustAsI8(q) + 32);
    }
  }
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  for (int h = 0; h < 2; ++h) {
    const int n = 128 * h;
    for (int l = 0; l < 32; ++l) {
      const uint8_t a = v6[n + l];
      const uint8_t b = v6[n + l + 32];
      const uint8_t c = v6[n + l + 64];
      const uint8_t e = v6[n + l + 96];
      ql[64 * h + l] = static_cast<uint8_t>((a & 15) | ((c & 15) << 4));
      ql[64 * h + l + 32] = static_cast<uint8_t>((b & 15) | ((e & 15) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
    }
  }
  for (int j = 0; j < 16; ++j) out[192 + j] = static_cast<uint8_t>(sc[j]);
  StoreLe16(out + 208, F32ToF16(d));
}

void EncodeAprQ4BlockRef(const float* x, size_t n, uint8_t* out) {
  const float max_abs = MaxAbsRef(x, n, 0.0f);
  const float scale = max_abs == 0.0f ? 1.0f : max_abs / 7.0f;  // f32, NOT rounded to f16 for quantizing
  StoreLe16(out, F32ToF16(scale));
  uint8_t* packed = out + 2;
  std::fill(packed, packed + 16, 0);
  for (size_t i = 0; i < n; ++i) {
    const int8_t q = RustAsI8(RustClamp(RustRound(x[i] / scale), -8.0f, 7.0f));
    const uint8_t nib = static_cast<uint8_t>((q + 8) & 0x0F);
    packed[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? nib : nib << 4);
  }
}

void EncodeAprQ4Ref(const float* x, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; i += kAprQ4Block) {
    const size_t len = std::min(n - i, kAprQ4Block);
    EncodeAprQ4BlockRef(x + i, len, out + i / kAprQ4Block * kAprQ4BlockBytes);
  }
}

float MaxAbsRef(const float* x, size_t n, float acc) {
  for (size_t i = 0; i < n; ++i) acc = RustFmax(acc, std::fabs(x[i]));
  return acc;
}

float AprQ8Scale(float max_abs) { return max_abs == 0.0f ? 1.0f : max_abs / 127.0f; }

void EncodeAprQ8Ref(const float* x, size_t n, float scale, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<uint8_t>(RustAsI8(RustClamp(RustRound(x[i] / scale), -127.0f, 127.0f)));
  }
}

void EncodeF16Ref(const float* x, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) StoreLe16(out + 2 * i, F32ToF16(x[i]));
}

void WidenBf16Ref(const uint8_t* src, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToF32(LoadLe16(src + 2 * i));
}

void WidenF16Ref(const uint8_t* src, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = F16ToF32(LoadLe16(src + 2 * i));
}

uint16_t E4m3ScaledToBf16(uint8_t b, float scale) {
  const float x = E4m3ToF32(b);
  if (std::isnan(x)) return F32ToBf16(x);
  return F32ToBf16(x * scale);
}

void E4m3ScaledToBf16Ref(const uint8_t* src, size_t n, float scale, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = E4m3ScaledToBf16(src[i], scale);
}

}  // namespace aprfs::codec
