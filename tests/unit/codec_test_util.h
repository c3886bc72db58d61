#pragma once

// Helpers of the codec tests: the input vectors of apr-quantization.md §6.0 and hex spelling.

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace aprfs::codec::testing {

// §6.0: ramp[i] = f32((i-128)/64), wave[i] = f32(sin(0.37 i)·0.05), pos[i] = f32(1 + i/1024),
// m[i] = f32(cos(0.11 i)·0.02), all in binary64 then rounded once.
inline std::vector<float> Ramp(size_t n = 256) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((static_cast<double>(i) - 128) / 64);
  return v;
}
inline std::vector<float> Wave(size_t n = 256) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 0.05);
  return v;
}
inline std::vector<float> Pos(size_t n = 256) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(1 + static_cast<double>(i) / 1024);
  return v;
}
inline std::vector<float> M(size_t n = 900) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)) * 0.02);
  return v;
}

// "04 02 81" (any white space) -> bytes.
inline std::vector<uint8_t> Hex(std::string_view text) {
  std::vector<uint8_t> out;
  int high = -1;
  for (char c : text) {
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) continue;
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  return out;
}

// bytes -> "04 02 81", for readable failure messages.
inline std::string ToHex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}
inline std::string ToHex(const std::vector<uint8_t>& v) { return ToHex(v.data(), v.size()); }

}  // namespace aprfs::codec::testing
