#pragma once

#include <string_view>

namespace aprfs {

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF),
// the rule Rust's str::from_utf8 applies.
bool IsValidUtf8(std::string_view text);

}  // namespace aprfs
