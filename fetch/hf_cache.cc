#include "fetch/hf_cache.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace aprfs {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string ExpandHome(std::string path) {
  if (!path.empty() && path[0] == '~' && (path.size() == 1 || path[1] == '/')) {
    path = Env("HOME").value_or("") + path.substr(1);
  }
  return path;
}

bool IsHex40(const std::string& text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

std::string DefaultHfHubCache() {
  if (auto dir = Env("HF_HUB_CACHE")) return ExpandHome(*dir);
  if (auto dir = Env("HUGGINGFACE_HUB_CACHE")) return ExpandHome(*dir);
  if (auto home = Env("HF_HOME")) return ExpandHome(*home) + "/hub";
  if (auto xdg = Env("XDG_CACHE_HOME")) return ExpandHome(*xdg) + "/huggingface/hub";
  return ExpandHome("~/.cache/huggingface/hub");
}

std::optional<std::string> RepoIdFromFolder(const std::string& folder_name) {
  const std::string prefix = "models--";
  if (folder_name.rfind(prefix, 0) != 0 || folder_name.size() == prefix.size()) {
    return std::nullopt;
  }
  std::string rest = folder_name.substr(prefix.size());
  size_t sep = rest.find("--");  // repo ids cannot contain "--", so this is unambiguous
  if (sep == std::string::npos) return rest;
  if (rest.find("--", sep + 2) != std::string::npos || sep == 0 || sep + 2 == rest.size()) {
    return std::nullopt;
  }
  return rest.substr(0, sep) + "/" + rest.substr(sep + 2);
}

std::vector<CachedRepo> ListCachedModels(const std::string& cache_dir) {
  std::vector<CachedRepo> repos;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache_dir, ec)) {
    std::optional<std::string> repo_id = RepoIdFromFolder(entry.path().filename().string());
    if (!repo_id || !entry.is_directory(ec)) continue;
    CachedRepo repo;
    repo.repo_id = *repo_id;
    repo.folder = entry.path().string();
    std::ifstream ref(entry.path() / "refs" / "main");
    if (!ref) {
      repo.problem = "no refs/main in " + repo.folder;
    } else {
      std::stringstream text;
      text << ref.rdbuf();
      repo.commit = text.str();
      // Python writes the ref without a newline; other tools may add one, so trim defensively.
      while (!repo.commit.empty() && std::isspace(static_cast<unsigned char>(repo.commit.back()))) {
        repo.commit.pop_back();
      }
      fs::path snapshot = entry.path() / "snapshots" / repo.commit;
      if (!IsHex40(repo.commit)) {
        repo.problem = "refs/main does not hold a 40-hex commit: " + repo.folder;
      } else if (!fs::is_directory(snapshot, ec)) {
        repo.problem = "refs/main names commit " + repo.commit + " but snapshots/" + repo.commit +
                       " is missing";
      } else {
        repo.snapshot_dir = snapshot.string();
      }
    }
    repos.push_back(std::move(repo));
  }
  std::sort(repos.begin(), repos.end(),
            [](const CachedRepo& a, const CachedRepo& b) { return a.repo_id < b.repo_id; });
  return repos;
}

std::optional<std::string> HfBlobSha256(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(path, ec);
  if (ec || real.parent_path().filename() != "blobs") return std::nullopt;
  const std::string name = real.filename().string();
  if (name.size() != 64) return std::nullopt;
  for (char c : name) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return name;
}

}  // namespace aprfs
