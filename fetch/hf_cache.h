#pragma once

#include <optional>
#include <string>
#include <vector>

namespace aprfs {

// The hub cache folder the official client would use (hf-hub.md §5): HF_HUB_CACHE,
// HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
// Empty variables count as unset (as llama.cpp does); a leading `~` is expanded.
std::string DefaultHfHubCache();

// One model repo of the cache, resolved through refs/main (hf-hub.md §6.2).
struct CachedRepo {
  std::string repo_id;       // "microsoft/phi-4", or "gpt2" for a legacy id
  std::string folder;        // .../models--microsoft--phi-4
  std::string commit;        // from refs/main; empty when the ref is missing
  std::string snapshot_dir;  // .../snapshots/<commit>; empty when unusable
  std::string problem;       // why the repo cannot be used, empty when it can
};

// Every `models--*` folder of the cache. Datasets and spaces are not models and are skipped.
std::vector<CachedRepo> ListCachedModels(const std::string& cache_dir);

// The sha256 an HF cache blob is named by (hf-hub.md §6.1) when `path` (a snapshot symlink, a
// blob, or /proc/self/fd/N) resolves to blobs/<64 lowercase hex>; nullopt otherwise.
std::optional<std::string> HfBlobSha256(const std::string& path);

// "models--org--name" -> "org/name"; nullopt for a folder that is not a model repo.
std::optional<std::string> RepoIdFromFolder(const std::string& folder_name);

}  // namespace aprfs
