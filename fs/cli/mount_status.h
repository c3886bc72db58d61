#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace aprfs {

// The `.aprfs/status.json` of the aprfs mount at `mountpoint` (checked in mountinfo first, so
// a dead or foreign mount gets a clear message), or nullopt with *error saying why.
std::optional<nlohmann::json> ReadMountStatus(const std::string& mountpoint, std::string* error);

// A string field of a JSON object; "" when absent, null or not a string.
std::string JsonString(const nlohmann::json& object, const char* key);
// An unsigned field; 0 when absent or not an unsigned number.
uint64_t JsonCount(const nlohmann::json& object, const char* key);

}  // namespace aprfs
