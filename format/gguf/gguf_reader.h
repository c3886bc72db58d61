#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/apr/apr_reader.h"  // ReadAt

namespace aprfs {

// A GGUF file as llama.cpp's loader reads it (gguf-view.md §1, §1.7, §7.1): what `aprfs inspect`
// shows of a mounted or copied .gguf, and the rules the loader would refuse it by.
struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;                // relative to the data section
  std::optional<uint64_t> bytes;      // nullopt for a type aprfs does not know the size of
};

struct GgufFile {
  uint32_t version = 0;
  // Scalars and strings as JSON values; arrays as {"type": element type, "count": n}, with
  // their elements for arrays of at most 16.
  std::vector<std::pair<std::string, nlohmann::json>> kv;
  std::vector<GgufTensorInfo> tensors;
  uint32_t alignment = 32;
  uint64_t data_start = 0;
  std::vector<std::string> problems;  // what llama.cpp would refuse, each naming its rule

  const nlohmann::json* Find(const std::string& key) const;
};

// Reads the header, the KVs and the tensor infos through `read_at`, checking llama.cpp's rules.
// A structure it cannot read further is a problem, not an exception (read_at's own errors
// propagate). `file` names the file in problems.
GgufFile ReadGgufFile(const ReadAt& read_at, uint64_t size, const std::string& file);

// "Q4_K", "F16"... or "type 23".
std::string GgmlTypeNameById(uint32_t type);

}  // namespace aprfs
