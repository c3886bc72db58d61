#pragma once

#include <optional>
#include <string>
#include <vector>

namespace aprfs {

// The JSON config file (`--config FILE`, default $XDG_CONFIG_HOME/aprfs/config.json or
// ~/.config/aprfs/config.json): the same settings as the command line, e.g.
//   {"repos": ["microsoft/phi-4", "Qwen/Qwen2.5-7B-Instruct@main"], "sources": ["/srv/models"],
//    "cache_dir": "/var/cache/aprfs", "cache_size": "200G", "max_connections": 8,
//    "max_memory": "512M", "views": ["apr", "q4k"], "view_cache": true,
//    "s3_endpoint": "http://rgw.local:7480", "s3_region": "us-east-1", "s3_profile": "models",
//    "s3_addressing": "path", "no_sign_request": false, "s3_rescan": 60}
// (S3 sources go in "sources" as s3://BUCKET/PREFIX.)
struct ConfigFile {
  std::vector<std::string> repos;
  std::vector<std::string> sources;
  std::optional<std::string> hf_cache;
  std::optional<bool> no_hf_cache;
  std::optional<std::string> cache_dir;
  std::optional<std::string> cache_size;
  std::optional<unsigned> max_connections;
  std::optional<std::string> max_memory;
  std::optional<std::string> views;  // "apr,q4k" (a JSON list is joined)
  std::optional<bool> view_cache;
  std::optional<std::string> s3_endpoint;
  std::optional<std::string> s3_region;
  std::optional<std::string> s3_profile;
  std::optional<std::string> s3_addressing;  // auto, path, virtual
  std::optional<bool> no_sign_request;
  std::optional<int> s3_rescan;  // seconds
};

// Where the config file is looked for when --config is not given.
std::string DefaultConfigPath();
// Reads `path`; throws std::runtime_error naming the file, the key and the rule.
ConfigFile LoadConfigFile(const std::string& path);

}  // namespace aprfs
