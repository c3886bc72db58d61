#include "fs/cli/inspect_gguf.h"

#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "format/gguf/gguf_reader.h"
#include "fs/cli/commands.h"

namespace aprfs {
namespace {

// Arrays as "[N x type]": the vocabulary alone is 100k strings.
std::string Shown(const nlohmann::json& value) {
  if (value.is_object() && value.contains("count")) {
    return "[" + std::to_string(value["count"].get<uint64_t>()) + " values]";
  }
  std::string text = value.dump();
  return text.size() > 120 ? text.substr(0, 117) + "..." : text;
}

}  // namespace

int InspectGguf(const std::string& file, const ReadAt& read_at, uint64_t size, bool json) {
  const GgufFile gguf = ReadGgufFile(read_at, size, file);
  const bool valid = gguf.problems.empty();
  if (json) {
    nlohmann::json kv = nlohmann::json::object();
    for (const auto& [key, value] : gguf.kv) kv[key] = value;
    nlohmann::json tensors = nlohmann::json::array();
    for (const GgufTensorInfo& t : gguf.tensors) {
      tensors.push_back({{"name", t.name},
                         {"type", GgmlTypeNameById(t.type)},
                         {"ne", t.ne},
                         {"offset", gguf.data_start + t.offset},
                         {"size", t.bytes ? nlohmann::json(*t.bytes) : nlohmann::json()}});
    }
    std::cout << nlohmann::json({{"file", file},
                                 {"size", size},
                                 {"format", "gguf"},
                                 {"version", gguf.version},
                                 {"alignment", gguf.alignment},
                                 {"data_offset", gguf.data_start},
                                 {"kv", kv},
                                 {"tensor_count", gguf.tensors.size()},
                                 {"tensors", tensors},
                                 {"valid", valid},
                                 {"errors", gguf.problems}})
                     .dump(2)
              << "\n";
    return valid ? 0 : 1;
  }
  if (gguf.version != 3) {
    std::cout << file << ": INVALID: " << gguf.problems.front() << "\n";
    return 1;
  }
  std::cout << file << ": GGUF v" << gguf.version << ", " << HumanBytes(size) << ", "
            << gguf.tensors.size() << " tensors, " << gguf.kv.size() << " keys, data at "
            << gguf.data_start << "\n";
  for (const auto& [key, value] : gguf.kv) {
    // The model's identity and shape; the tokenizer's arrays as counts.
    if (key.rfind("tokenizer.chat_template", 0) == 0) continue;
    std::cout << "  " << key << ": " << Shown(value) << "\n";
  }
  std::cout << "\n" << std::left << std::setw(40) << "TENSOR" << std::setw(8) << "TYPE"
            << std::setw(22) << "NE" << "OFFSET\n";
  for (const GgufTensorInfo& t : gguf.tensors) {
    std::cout << std::setw(40) << t.name << std::setw(8) << GgmlTypeNameById(t.type)
              << std::setw(22) << ShapeText(t.ne) << gguf.data_start + t.offset << "\n";
  }
  if (valid) {
    std::cout << "\nvalid\n";
    return 0;
  }
  std::cout << "\nINVALID:\n";
  for (const std::string& problem : gguf.problems) std::cout << "  " << problem << "\n";
  return 1;
}

}  // namespace aprfs
