#include "fs/cli/config_file.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace aprfs {
namespace {

using nlohmann::json;

std::runtime_error Bad(const std::string& path, const std::string& what) {
  return std::runtime_error("config file " + path + ": " + what);
}

std::vector<std::string> StringList(const json& value, const std::string& key,
                                    const std::string& path) {
  if (!value.is_array()) throw Bad(path, "\"" + key + "\" must be a list of strings");
  std::vector<std::string> out;
  for (const json& item : value) {
    if (!item.is_string()) throw Bad(path, "\"" + key + "\" must be a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::string String(const json& value, const std::string& key, const std::string& path) {
  if (!value.is_string()) throw Bad(path, "\"" + key + "\" must be a string");
  return value.get<std::string>();
}

}  // namespace

std::string DefaultConfigPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/aprfs/config.json";
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.config/aprfs/config.json";
}

ConfigFile LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Bad(path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
  } catch (const json::exception& e) {
    throw Bad(path, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) throw Bad(path, "must be a JSON object");
  ConfigFile config;
  for (const auto& [key, value] : root.items()) {
    if (key == "repos") {
      config.repos = StringList(value, key, path);
    } else if (key == "sources") {
      config.sources = StringList(value, key, path);
    } else if (key == "hf_cache") {
      config.hf_cache = String(value, key, path);
    } else if (key == "no_hf_cache") {
      if (!value.is_boolean()) throw Bad(path, "\"no_hf_cache\" must be true or false");
      config.no_hf_cache = value.get<bool>();
    } else if (key == "cache_dir") {
      config.cache_dir = String(value, key, path);
    } else if (key == "cache_size") {
      config.cache_size = value.is_number_unsigned() ? std::to_string(value.get<uint64_t>())
                                                      : String(value, key, path);
    } else if (key == "max_connections") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() == 0 || value.get<uint64_t>() > 256) {
        throw Bad(path, "\"max_connections\" must be an integer from 1 to 256");
      }
      config.max_connections = value.get<unsigned>();
    } else if (key == "max_memory") {
      config.max_memory = value.is_number_unsigned() ? std::to_string(value.get<uint64_t>())
                                                      : String(value, key, path);
    } else if (key == "views") {
      std::string joined;
      for (const std::string& view : value.is_string() ? std::vector<std::string>{value.get<std::string>()}
                                                       : StringList(value, key, path)) {
        joined += (joined.empty() ? "" : ",") + view;
      }
      config.views = joined;
    } else if (key == "view_cache") {
      if (!value.is_boolean()) throw Bad(path, "\"view_cache\" must be true or false");
      config.view_cache = value.get<bool>();
    } else if (key == "s3_endpoint") {
      config.s3_endpoint = String(value, key, path);
    } else if (key == "s3_region") {
      config.s3_region = String(value, key, path);
    } else if (key == "s3_profile") {
      config.s3_profile = String(value, key, path);
    } else if (key == "s3_addressing") {
      config.s3_addressing = String(value, key, path);
    } else if (key == "s3_rescan") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() > 86400) {
        throw Bad(path, "\"s3_rescan\" must be a number of seconds from 0 to 86400");
      }
      config.s3_rescan = value.get<int>();
    } else if (key == "no_sign_request") {
      if (!value.is_boolean()) throw Bad(path, "\"no_sign_request\" must be true or false");
      config.no_sign_request = value.get<bool>();
    } else {
      throw Bad(path, "unknown key \"" + key + "\" (known: repos, sources, hf_cache, "
                      "no_hf_cache, cache_dir, cache_size, max_connections, max_memory, views, "
                      "view_cache, "
                      "s3_endpoint, s3_region, s3_profile, s3_addressing, no_sign_request, "
                      "s3_rescan)");
    }
  }
  return config;
}

}  // namespace aprfs
