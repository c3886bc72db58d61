#include "format/apr/json_spelling.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace aprfs {
namespace {

// Ryu's "pretty" layout of shortest digits D (value = D * 10^k). The f32 and f64 variants differ
// only in the thresholds: f32 switches to scientific notation past 13 integer digits or below
// 1e-6, f64 past 16 digits or below 1e-5.
template <typename Float>
void AppendRyu(std::string& out, Float value, int max_integer_digits, int min_kk) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view text(buf, end - buf);
  if (text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  size_t e_pos = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exponent = std::atoi(std::string(text.substr(e_pos + 1)).c_str());
  int length = static_cast<int>(digits.size());
  int k = exponent - (length - 1);
  int kk = length + k;
  if (k >= 0 && kk <= max_integer_digits) {
    out += digits;
    out.append(k, '0');
    out += ".0";
  } else if (kk > 0 && kk <= max_integer_digits) {
    out += digits.substr(0, kk);
    out += '.';
    out += digits.substr(kk);
  } else if (kk > min_kk && kk <= 0) {
    out += "0.";
    out.append(-kk, '0');
    out += digits;
  } else {
    out += digits[0];
    if (length > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += 'e';
    out += std::to_string(kk - 1);
  }
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  out += '"';
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case 0x08: out += "\\b"; break;
      case 0x09: out += "\\t"; break;
      case 0x0A: out += "\\n"; break;
      case 0x0C: out += "\\f"; break;
      case 0x0D: out += "\\r"; break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", c);
          out += esc;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void AppendJsonF32(std::string& out, float value) { AppendRyu(out, value, 13, -6); }

void AppendJsonF64(std::string& out, double value) { AppendRyu(out, value, 16, -5); }

}  // namespace aprfs
