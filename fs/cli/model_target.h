#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "format/views/view_kind.h"
#include "fs/catalog.h"
#include "fs/cli/commands.h"
#include "fs/cli/mount_status.h"

namespace aprfs {

// A .apr file inside an aprfs mount, with what the daemon says about it (.aprfs/status.json).
struct MountedModel {
  std::string mountpoint;
  std::string path;  // absolute path of the file in the mount (.apr, .gguf...)
  nlohmann::json mount;  // the whole status.json
  nlohmann::json model;  // its entry in "models"
  ViewKind view = ViewKind::kApr;  // which of the model's files the path names

  bool remote() const { return JsonString(model, "kind") == "remote"; }
};

// What `aprfs prefetch` and `aprfs verify` are pointed at.
struct ModelTarget {
  std::string label;                      // how messages name it
  std::optional<MountedModel> mounted;    // a file in an aprfs mount
  std::optional<std::string> file;        // a file outside any mount
  std::optional<CatalogOptions> catalog;  // the model(s) to load in this process
  std::optional<std::string> branch;      // remote: the ref published shards update
};

// TARGET is a .apr in an aprfs mount, a .apr file elsewhere, a folder of models, ORG/NAME[@REV],
// or the name of a repo of the config file / --repo ("phi-4" or "phi-4.apr"). Remote models
// are loaded with caches that are the mount's (a mounted file) or the options'. Throws
// std::runtime_error saying what TARGET could not be.
ModelTarget ResolveTarget(const std::string& text, const SourceOptions& options);

}  // namespace aprfs
