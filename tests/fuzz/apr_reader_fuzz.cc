// libFuzzer target: a whole APR file. aprender's reader checks must either accept it or throw
// FormatError, and the layout lint must cope with whatever the reader accepted.
#include <cstdint>
#include <cstring>
#include <string>

#include "format/apr/apr_reader.h"
#include "format/error.h"

using namespace aprfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  ReadAt read_at = [&](uint64_t offset, uint64_t length) -> std::string {
    if (offset >= file.size()) return {};
    return file.substr(offset, length);
  };
  try {
    AprFile apr = ReadAprFile(read_at, file.size());
    LintAprFile(apr, read_at);
  } catch (const FormatError&) {
  }
  return 0;
}
