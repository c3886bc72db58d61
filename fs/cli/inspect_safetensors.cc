#include "fs/cli/inspect_safetensors.h"

#include <iomanip>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/safetensors/safetensors_header.h"
#include "fs/cli/commands.h"

namespace aprfs {

bool LooksLikeSafetensors(const std::string& first_bytes) {
  return first_bytes.size() >= 9 && first_bytes[8] == '{';
}

SafetensorsCheck CheckSafetensorsFile(const std::string& file, const ReadAt& read_at, uint64_t size) {
  SafetensorsCheck check;
  std::vector<std::string>& errors = check.errors;
  std::vector<std::string>& warnings = check.warnings;
  SafetensorsHeader& header = check.header;
  try {
    const uint64_t length = ParseSafetensorsHeaderLength(read_at(0, 8), size, file);
    header = ParseSafetensorsHeader(read_at(8, length), size, file);
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  if (errors.empty()) {
    // What loaders ask beyond the reader's rules.
    auto format = header.metadata.find("format");
    if (format == header.metadata.end()) {
      warnings.push_back("no \"format\" in __metadata__: transformers' load_state_dict and older "
                         "loaders expect one (\"pt\")");
    } else if (format->second != "pt" && format->second != "tf" && format->second != "flax" &&
               format->second != "mlx") {
      errors.push_back("__metadata__ \"format\" is \"" + format->second +
                       "\": transformers accepts only pt, tf, flax or mlx");
    }
    if (header.data_start() % 8 != 0) {
      warnings.push_back("the data starts at byte " + std::to_string(header.data_start()) +
                         ", not a multiple of 8 (the official writer pads the header): tensors "
                         "cannot be viewed in place");
    }
  }
  return check;
}

int InspectSafetensors(const std::string& file, const ReadAt& read_at, uint64_t size, bool json) {
  nlohmann::json report = {{"file", file}, {"size", size}, {"format", "safetensors"}};
  const SafetensorsCheck check = CheckSafetensorsFile(file, read_at, size);
  const SafetensorsHeader& header = check.header;
  const std::vector<std::string>& errors = check.errors;
  const std::vector<std::string>& warnings = check.warnings;
  uint64_t data_bytes = 0;
  for (const SafetensorsTensor& t : header.tensors) data_bytes += t.size();
  report["header_len"] = header.header_len;
  report["metadata"] = header.metadata;
  report["tensor_count"] = header.tensors.size();
  report["data_bytes"] = data_bytes;
  report["valid"] = errors.empty();
  report["errors"] = errors;
  report["warnings"] = warnings;

  if (json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const SafetensorsTensor& t : header.tensors) {
      tensors.push_back({{"name", t.name},
                         {"dtype", std::string(StDtypeName(t.dtype))},
                         {"shape", t.shape},
                         {"offset", header.data_start() + t.begin},
                         {"size", t.size()}});
    }
    report["tensors"] = tensors;
    std::cout << report.dump(2) << "\n";
    return errors.empty() ? 0 : 1;
  }
  if (!errors.empty() && header.tensors.empty()) {
    std::cout << file << ": INVALID: " << errors.front() << "\n";
    return 1;
  }
  std::cout << file << ": safetensors, " << HumanBytes(size) << ", " << header.tensors.size()
            << " tensors, header " << header.header_len << " bytes\n";
  for (const auto& [key, value] : header.metadata) {
    std::cout << "  " << key << ": " << nlohmann::json(value).dump() << "\n";
  }
  std::cout << "\n" << std::left << std::setw(56) << "TENSOR" << std::setw(8) << "DTYPE"
            << std::setw(20) << "SHAPE" << "OFFSET\n";
  for (const SafetensorsTensor& t : header.tensors) {
    std::cout << std::setw(56) << t.name << std::setw(8) << StDtypeName(t.dtype) << std::setw(20)
              << ShapeText(t.shape) << header.data_start() + t.begin << "\n";
  }
  for (const std::string& warning : warnings) std::cout << "\nwarning: " << warning;
  if (!warnings.empty()) std::cout << "\n";
  if (errors.empty()) {
    std::cout << "\nvalid\n";
    return 0;
  }
  std::cout << "\nINVALID:\n";
  for (const std::string& error : errors) std::cout << "  " << error << "\n";
  return 1;
}

}  // namespace aprfs
