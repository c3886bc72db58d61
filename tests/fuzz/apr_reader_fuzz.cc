// libFuzzer target: a whole APR or GGUF file (the containers `aprfs inspect` reads).
// aprender's reader checks must either accept it or throw FormatError, and the layout lint must
// cope with whatever the reader accepted; the GGUF reader reports problems, never throws.
#include <cstdint>
#include <cstring>
#include <string>

#include "format/apr/apr_reader.h"
#include "format/error.h"
#include "format/gguf/gguf_reader.h"

using namespace aprfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  ReadAt read_at = [&](uint64_t offset, uint64_t length) -> std::string {
    if (offset >= file.size()) return {};
    return file.substr(offset, length);
  };
  if (file.compare(0, 4, "GGUF") == 0) {
    (void)ReadGgufFile(read_at, file.size(), "fuzz.gguf");
    return 0;
  }
  try {
    AprFile apr = ReadAprFile(read_at, file.size());
    LintAprFile(apr, read_at);
  } catch (const FormatError&) {
  }
  return 0;
}
