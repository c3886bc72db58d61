#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace aprfs {

// Input that breaks a format rule. The message names the file, the tensor (when there is one)
// and the rule, so a user can act on it without reading our code.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A name from the input, quoted for a message: control bytes become \xNN (a NUL would cut the
// message short) and very long names are shortened.
std::string Quote(std::string_view name);

}  // namespace aprfs
