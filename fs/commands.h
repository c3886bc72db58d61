#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "fs/catalog.h"

namespace aprfs {

// Options shared by the verbs that look at models (`mount`, `ls`).
struct SourceOptions {
  std::string hf_cache;  // empty: the default of hf-hub.md §5
  bool no_hf_cache = false;
  std::vector<std::string> sources;

  void AddTo(CLI::App& app);
  CatalogOptions ToCatalogOptions() const;
};

// Each verb registers its subcommand and runs when it was chosen; returns the exit code.
void RegisterMount(CLI::App& app, int& exit_code);
void RegisterUmount(CLI::App& app, int& exit_code);
void RegisterLs(CLI::App& app, int& exit_code);
void RegisterInspect(CLI::App& app, int& exit_code);

// "1.5 GiB"-style sizes for people.
std::string HumanBytes(uint64_t bytes);
// Sets the global logger: level name ("info", "debug"...) and optional file.
void SetUpLogging(const std::string& level, const std::string& file);

}  // namespace aprfs
