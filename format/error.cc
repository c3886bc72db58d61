#include "format/error.h"

#include <cstdio>

namespace aprfs {

std::string Quote(std::string_view name) {
  constexpr size_t kMaxShown = 300;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02X", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}

}  // namespace aprfs
