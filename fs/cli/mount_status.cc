#include "fs/cli/mount_status.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fs/mount/mountinfo.h"

namespace aprfs {

using nlohmann::json;

std::optional<json> ReadMountStatus(const std::string& path, std::string* error) {
  std::optional<MountEntry> mount = FindMount(path);
  if (!mount) {
    *error = path + ": not an aprfs mount (nothing is mounted there)";
    return std::nullopt;
  }
  if (mount->type != "fuse.aprfs") {
    *error = path + ": not an aprfs mount (it is " + mount->type + ")";
    return std::nullopt;
  }
  const std::string file = path + "/.aprfs/status.json";
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    int err = errno;
    *error = file + ": " + std::strerror(err) +
             (err == ENOTCONN ? " (the daemon is gone: `aprfs umount` it, or mount again)" : "");
    return std::nullopt;
  }
  json status = json::parse(text.str(), nullptr, false);
  if (status.is_discarded() || !status.is_object()) {
    *error = file + ": not valid JSON (a daemon of another aprfs version?)";
    return std::nullopt;
  }
  return status;
}

std::string JsonString(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) return "";
  return object[key].get<std::string>();
}

uint64_t JsonCount(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number_unsigned()) return 0;
  return object[key].get<uint64_t>();
}

}  // namespace aprfs
