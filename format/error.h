#pragma once

#include <stdexcept>
#include <string>

namespace aprfs {

// Input that breaks a format rule. The message names the file, the tensor (when there is one)
// and the rule, so a user can act on it without reading our code.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace aprfs
