#pragma once

#include <cstdint>
#include <string>

#include "format/apr/apr_reader.h"

namespace aprfs {

// `aprfs inspect` of a GGUF file (a mounted NAME.gguf or any other): the header, the keys that
// say what the model is, the tensor table, and what llama.cpp's loader would refuse. Prints
// text or JSON; returns the exit code (0 valid, 1 not).
int InspectGguf(const std::string& file, const ReadAt& read_at, uint64_t size, bool json);

}  // namespace aprfs
