#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "fs/catalog.h"

namespace aprfs {

// Options shared by the verbs that look at models (`mount`, `ls`), merged with the config file
// (the command line wins; lists add up).
struct SourceOptions {
  std::string hf_cache;  // empty: the default of hf-hub.md §5
  bool no_hf_cache = false;
  std::vector<std::string> sources;
  std::vector<std::string> repos;  // ORG/NAME[@REVISION]
  std::string config;              // empty: DefaultConfigPath() if it exists
  std::string cache_dir;           // empty: $XDG_CACHE_HOME/aprfs or ~/.cache/aprfs
  std::string cache_size;          // empty: no limit
  unsigned max_connections = 0;    // 0: 8
  std::string max_memory;          // empty: ChunkMemory::DefaultLimit()
  std::string views;               // empty: "apr,q4k"
  bool no_view_cache = false;
  // S3 sources: what overrides the AWS environment and profiles.
  std::string s3_endpoint;
  std::string s3_region;
  std::string s3_profile;
  std::string s3_addressing;
  bool no_sign_request = false;
  int s3_rescan = -1;  // seconds between listings of an S3 source; -1: 60; 0: listed once

  void AddTo(CLI::App& app);
  // Throws std::runtime_error for a bad --repo, --source s3://, --cache-size, config file or AWS
  // configuration.
  CatalogOptions ToCatalogOptions() const;
};

// Each verb registers its subcommand and runs when it was chosen; returns the exit code.
void RegisterMount(CLI::App& app, int& exit_code);
void RegisterUmount(CLI::App& app, int& exit_code);
void RegisterLs(CLI::App& app, int& exit_code);
void RegisterInspect(CLI::App& app, int& exit_code);
void RegisterStatus(CLI::App& app, int& exit_code);
void RegisterPrefetch(CLI::App& app, int& exit_code);
void RegisterVerify(CLI::App& app, int& exit_code);

// "apr,q4k" (or with ':' or '+'; "all") -> views; throws std::runtime_error naming an unknown one.
std::vector<ViewKind> ParseViewList(const std::string& text);

// "1.5 GiB"-style sizes for people.
std::string HumanBytes(uint64_t bytes);
// "[4096, 512]".
std::string ShapeText(const std::vector<uint64_t>& shape);
// Sets the global logger: level name ("info", "debug"...) and optional file.
void SetUpLogging(const std::string& level, const std::string& file);

}  // namespace aprfs
