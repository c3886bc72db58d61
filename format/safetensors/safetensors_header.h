#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "format/safetensors/dtype.h"

namespace aprfs {

// One tensor of a safetensors file. begin/end are relative to the data buffer (after the
// header), end exclusive, exactly as in the file's `data_offsets`.
struct SafetensorsTensor {
  std::string name;
  StDtype dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t size() const { return end - begin; }
};

// A parsed and validated safetensors header.
struct SafetensorsHeader {
  uint64_t header_len = 0;  // N, the JSON length (8-byte length prefix not included)
  std::vector<SafetensorsTensor> tensors;           // in data order (sorted by data_offsets)
  std::map<std::string, std::string> metadata;      // `__metadata__`, empty when absent

  // Absolute file offset of the data buffer.
  uint64_t data_start() const { return 8 + header_len; }
};

// The official reader refuses headers above 100 MB (HeaderTooLarge).
inline constexpr uint64_t kMaxSafetensorsHeaderLen = 100'000'000;

// Reads N from the first 8 bytes and checks it against the file size (HeaderTooSmall,
// HeaderTooLarge, InvalidHeaderLength). `file` only names the file in errors.
uint64_t ParseSafetensorsHeaderLength(std::string_view first_bytes, uint64_t file_size,
                                      std::string_view file);

// Parses and validates the N header bytes that follow the length prefix, with exactly the
// rules of the official library (hf-hub.md §7.3), plus a clear error for duplicate tensor
// names (forbidden by the spec). Throws FormatError naming the file, the tensor and the rule.
SafetensorsHeader ParseSafetensorsHeader(std::string_view header_json, uint64_t file_size,
                                         std::string_view file);

}  // namespace aprfs
