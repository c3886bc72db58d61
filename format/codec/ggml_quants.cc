#include "format/codec/ggml_quants.h"

#include <cmath>
#include <cstring>

#include "format/codec/block_layout.h"
#include "format/codec/half.h"

namespace aprfs::codec {
namespace {

// ggml's nearest_int: round half to even through the float adder, valid for |v| <= 2^22; out
// of that range (and for NaN) the same bit arithmetic gives the same garbage as ggml's.
int NearestInt(float v) {
  const float biased = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &biased, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// make_qkx2_quants (§5.3): an affine fit of n values to 0..nmax with weights w, searching
// nstep + 1 scales around the plain one; returns the scale, *neg_min = -(offset).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                     float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      error += w[i] * (diff * diff);
    }
    if (error < best_error) {
      std::memcpy(L, aux, n);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// make_qx_quants with rmse_type 1 (§5.4): symmetric levels -nmax..nmax-1 weighted by x², the
// best of 19 scales; L holds level + nmax.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  auto level = [&](float iscale, int i) { return Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1); };
  float iscale = -fnmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(fnmax + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(level(iscale, i) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

uint16_t GgmlFp16(float x) {
  if (std::isnan(x)) return static_cast<uint16_t>((std::signbit(x) ? 0x8000 : 0) | 0x7E00);
  return F32ToF16(x);
}

void EncodeGgmlQ8_0BlockRef(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;  // ggml's MAX: a NaN element makes amax NaN
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreLe16(out, GgmlFp16(d));
  for (int j = 0; j < 32; ++j) {
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
  }
}

void EncodeGgmlQ5_0BlockRef(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -16;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreLe16(out, GgmlFp16(d));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    // C's (int8_t) of a float truncates toward zero; MIN(31, .) compares signed, then the
    // result is stored as a byte.
    auto code = [&](float v) {
      const int t = static_cast<int8_t>(static_cast<int>(v * id + 16.5f));
      return static_cast<uint8_t>(t < 31 ? t : 31);
    };
    const uint8_t lo = code(x[j]);
    const uint8_t hi = code(x[j + 16]);
    out[6 + j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= static_cast<uint32_t>((lo & 0x10u) >> 4) << j;
    qh |= static_cast<uint32_t>((hi & 0x10u) >> 4) << (j + 16);
  }
  StoreLe32(out + 2, qh);
}

void FitKQuantRef(const float* x, int nmax, float rmin, int nstep, float scales[8],
                  float neg_mins[8], uint8_t L[256]) {
  float weights[32];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = MakeQkx2Quants(32, nmax, xs, weights, L + 32 * j, &neg_mins[j], rmin, 0.1f, nstep);
  }
}

void FitQ6KRef(const float* x, float scales[16], int8_t L[256]) {
  for (int g = 0; g < 16; ++g) scales[g] = MakeQxQuants(16, 32, x + 16 * g, L + 16 * g);
}

namespace {

// Q4_K and Q5_K share their scales: 8 sub-blocks fitted (`fit`), 6-bit scales and mins under
// fp16 d and dmin, then levels 0..nmax recomputed with the stored scales.
void EncodeKQuantLevels(KQuantFit fit, const float* x, int nmax, float rmin, int nstep,
                        uint8_t* out, uint8_t L[256]) {
  float scales[8], mins[8];
  fit(x, nmax, rmin, nstep, scales, mins, L);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int into a uint8_t before taking min(63, .).
    const uint8_t s = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    const uint8_t m = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls[j] = s < 63 ? s : 63;
    lm[j] = m < 63 ? m : 63;
  }
  const uint16_t d = GgmlFp16(max_scale / 63.0f);
  const uint16_t dmin = GgmlFp16(max_min / 63.0f);
  StoreLe16(out, d);
  StoreLe16(out + 2, dmin);
  PackQ4kScales(ls, lm, out + 4);
  for (int j = 0; j < 8; ++j) {
    const float dj = F16ToF32(d) * static_cast<float>(ls[j]);
    if (dj == 0) continue;  // keep the levels of the fit
    const float dmj = F16ToF32(dmin) * static_cast<float>(lm[j]);
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + i] + dmj) / dj), 0, nmax));
    }
  }
}

}  // namespace

void EncodeGgmlQ4KBlock(KQuantFit fit, const float* x, uint8_t* out) {
  uint8_t L[256];
  EncodeKQuantLevels(fit, x, 15, -1.0f, 20, out, L);
  uint8_t* q = out + 16;
  for (int c = 0; c < 256; c += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[c + l] | (L[c + l + 32] << 4));
  }
}

void EncodeGgmlQ5KBlock(KQuantFit fit, const float* x, uint8_t* out) {
  uint8_t L[256];
  EncodeKQuantLevels(fit, x, 31, -0.5f, 15, out, L);
  uint8_t* qh = out + 16;
  uint8_t* q = out + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int c = 0; c < 256; c += 64, q += 32, m1 <<= 2, m2 <<= 2) {
    for (int l = 0; l < 32; ++l) {
      int l1 = L[c + l], l2 = L[c + l + 32];
      if (l1 > 15) l1 -= 16, qh[l] |= m1;
      if (l2 > 15) l2 -= 16, qh[l] |= m2;
      q[l] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
  }
}

void EncodeGgmlQ4KBlockRef(const float* x, uint8_t* out) { EncodeGgmlQ4KBlock(FitKQuantRef, x, out); }
void EncodeGgmlQ5KBlockRef(const float* x, uint8_t* out) { EncodeGgmlQ5KBlock(FitKQuantRef, x, out); }
void EncodeGgmlQ6KBlockRef(const float* x, uint8_t* out) { EncodeGgmlQ6KBlock(FitQ6KRef, x, out); }

void EncodeGgmlQ6KBlock(Q6KFit fit, const float* x, uint8_t* out) {
  int8_t L[256];
  float scales[16];
  fit(x, scales, L);
  float max_scale = 0, max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    const float a = std::fabs(scales[g]);
    if (a > max_abs_scale) {
      max_abs_scale = a;
      max_scale = scales[g];
    }
  }
  std::memset(out, 0, kGgmlQ6KBytes);
  if (max_abs_scale < 1e-15f) return;  // an all-zero block (d = +0 too)
  const float iscale = -128.0f / max_scale;
  const uint16_t d = GgmlFp16(1 / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
  for (int g = 0; g < 16; ++g) {
    const int s = NearestInt(iscale * scales[g]);
    sc[g] = static_cast<int8_t>(s < 127 ? s : 127);
  }
  StoreLe16(out + 208, d);
  for (int g = 0; g < 16; ++g) {
    const float dg = F16ToF32(d) * static_cast<float>(sc[g]);
    if (dg == 0) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * g + i] = static_cast<int8_t>(Clamp(NearestInt(x[16 * g + i] / dg), -32, 31) + 32);
    }
  }
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  for (int h = 0; h < 256; h += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[h + l] & 0xF, q2 = L[h + l + 32] & 0xF;
      const uint8_t q3 = L[h + l + 64] & 0xF, q4 = L[h + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[h + l] >> 4) | ((L[h + l + 32] >> 4) << 2) |
                                   ((L[h + l + 64] >> 4) << 4) | ((L[h + l + 96] >> 4) << 6));
    }
  }
}

}  // namespace aprfs::codec
