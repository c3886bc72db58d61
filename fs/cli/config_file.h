#pragma once

#include <optional>
#include <string>
#include <vector>

namespace aprfs {

// The JSON config file (`--config FILE`, default $XDG_CONFIG_HOME/aprfs/config.json or
// ~/.config/aprfs/config.json): the same settings as the command line, e.g.
//   {"repos": ["microsoft/phi-4", "Qwen/Qwen2.5-7B-Instruct@main"], "sources": ["/srv/models"],
//    "cache_dir": "/var/cache/aprfs", "cache_size": "200G", "max_connections": 8,
//    "views": ["apr", "q4k"], "view_cache": true}
struct ConfigFile {
  std::vector<std::string> repos;
  std::vector<std::string> sources;
  std::optional<std::string> hf_cache;
  std::optional<bool> no_hf_cache;
  std::optional<std::string> cache_dir;
  std::optional<std::string> cache_size;
  std::optional<unsigned> max_connections;
  std::optional<std::string> views;  // "apr,q4k" (a JSON list is joined)
  std::optional<bool> view_cache;
};

// Where the config file is looked for when --config is not given.
std::string DefaultConfigPath();
// Reads `path`; throws std::runtime_error naming the file, the key and the rule.
ConfigFile LoadConfigFile(const std::string& path);

}  // namespace aprfs
