#pragma once

#include <cstdint>
#include <string>

#include <vector>

#include "format/apr/apr_reader.h"
#include "format/safetensors/safetensors_header.h"

namespace aprfs {

// Whether the file's first bytes are a safetensors header (a length, then a JSON object).
bool LooksLikeSafetensors(const std::string& first_bytes);

// The header checked with the official reader's rules (errors) and what loaders need beyond
// them (errors or warnings): what inspect prints and verify judges.
struct SafetensorsCheck {
  SafetensorsHeader header;
  std::vector<std::string> errors, warnings;
};
SafetensorsCheck CheckSafetensorsFile(const std::string& file, const ReadAt& read_at, uint64_t size);

// `aprfs inspect` of a safetensors file (a mounted NAME.safetensors or any other): the header
// checked with the official reader's rules, what loaders need beyond them, and the tensor
// table. Prints text or JSON; returns the exit code (0 valid, 1 not).
int InspectSafetensors(const std::string& file, const ReadAt& read_at, uint64_t size, bool json);

}  // namespace aprfs
