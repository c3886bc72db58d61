#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace aprfs {

// Strings stored end to end in one buffer: a vocabulary of 128k short tokens takes two
// allocations and ~1.5 MB instead of 128k std::strings of 32 bytes each (4 MB), in every plan
// that embeds a tokenizer.
class StringList {
 public:
  void push_back(std::string_view text) {
    chars_.append(text);
    ends_.push_back(chars_.size());
  }
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::string_view operator[](size_t i) const {
    const uint64_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(chars_).substr(begin, ends_[i] - begin);
  }
  void swap(StringList& other) noexcept {
    chars_.swap(other.chars_);
    ends_.swap(other.ends_);
  }

  friend bool operator==(const StringList& list, const std::vector<std::string>& strings) {
    if (list.size() != strings.size()) return false;
    for (size_t i = 0; i < strings.size(); ++i) {
      if (list[i] != strings[i]) return false;
    }
    return true;
  }
  friend std::ostream& operator<<(std::ostream& out, const StringList& list) {
    out << '{';
    for (size_t i = 0; i < list.size(); ++i) out << (i ? ", \"" : "\"") << list[i] << '"';
    return out << '}';
  }

 private:
  std::string chars_;
  std::vector<uint64_t> ends_;
};

}  // namespace aprfs
