#include "fs/cli/model_target.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "fetch/hub_client.h"
#include "fs/cli/mount_status.h"
#include "fs/mount/mountinfo.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;

// The aprfs mount holding `path`, from mountinfo only (never touches the mount).
std::optional<std::string> EnclosingAprfsMount(const fs::path& path) {
  for (fs::path dir = path.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    std::optional<MountEntry> mount = FindMount(dir.string());
    if (mount) return mount->type == "fuse.aprfs" ? std::optional(dir.string()) : std::nullopt;
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

MountedModel FindMountedModel(const std::string& mountpoint, const fs::path& file) {
  std::string error;
  std::optional<nlohmann::json> status = ReadMountStatus(mountpoint, &error);
  if (!status) throw std::runtime_error(error);
  MountedModel mounted{mountpoint, file.string(), *status, {}};
  const std::string relative = fs::path(file).lexically_relative(mountpoint).string();
  // The .apr of a model, else one of its views ("phi-4.q4k.apr" is a view of "phi-4.apr").
  std::vector<std::pair<std::string, ViewKind>> readings = {{relative, ViewKind::kApr}};
  const fs::path folder = fs::path(relative).parent_path();
  if (auto split = SplitViewFileName(fs::path(relative).filename().string());
      split && split->second != ViewKind::kApr) {
    readings.emplace_back((folder / ViewFileName(split->first, ViewKind::kApr)).string(), split->second);
  }
  for (const auto& [apr_name, view] : readings) {
    for (const nlohmann::json& model : mounted.mount.value("models", nlohmann::json::array())) {
      for (const nlohmann::json& name : model.value("names", nlohmann::json::array())) {
        if (name == apr_name) {
          mounted.model = model;
          mounted.view = view;
          return mounted;
        }
      }
    }
  }
  throw std::runtime_error(file.string() + ": no model of the aprfs mount at " + mountpoint +
                           " has that name");
}

// Catalog options that load one remote repo and nothing else: no discovery of the HF cache or
// of source folders, whose models are not the target (the HF cache is still used to read
// complete shards and to publish fetched ones).
CatalogOptions OnlyRepo(SourceOptions options, const RemoteRepoSpec& spec) {
  options.sources.clear();
  options.repos = {spec.repo_id + "@" + spec.revision};  // so the remote settings are filled
  CatalogOptions catalog = options.ToCatalogOptions();
  catalog.sources.clear();
  catalog.repos = {spec};
  catalog.hf_cache.reset();
  return catalog;
}

std::optional<std::string> BranchOf(const std::string& revision) {
  if (revision.empty() || IsCommitHash(revision)) return std::nullopt;
  return revision;
}

ModelTarget FromMount(const std::string& mountpoint, const fs::path& file,
                      const SourceOptions& options) {
  ModelTarget target;
  target.label = file.string();
  target.mounted = FindMountedModel(mountpoint, file);
  const MountedModel& mounted = *target.mounted;
  if (!mounted.remote()) return target;
  // The same caches as the daemon, so nothing is fetched twice.
  SourceOptions same = options;
  const nlohmann::json& status = mounted.mount;
  if (status.contains("cache_dir") && status["cache_dir"].is_string()) {
    same.cache_dir = status["cache_dir"];
  }
  if (status.contains("hf_cache") && status["hf_cache"].is_string()) {
    same.hf_cache = status["hf_cache"];
    same.no_hf_cache = false;
  } else {
    same.no_hf_cache = true;
  }
  if (status.contains("cache_size_limit") && status["cache_size_limit"].is_number_unsigned()) {
    same.cache_size = std::to_string(status["cache_size_limit"].get<uint64_t>());
  }
  std::string source = JsonString(mounted.model, "source");
  if (source.rfind("hf://", 0) != 0) {
    throw std::runtime_error(file.string() + ": remote model with an unexpected source \"" +
                             source + "\"");
  }
  std::string revision = JsonString(mounted.model, "revision");
  std::string requested = JsonString(mounted.model, "requested_revision");
  std::string spec = source.substr(5) + "@" + (revision.empty() ? requested : revision);
  std::optional<RemoteRepoSpec> parsed = ParseRepoSpec(spec);
  if (!parsed) throw std::runtime_error(file.string() + ": bad source " + spec);
  target.catalog = OnlyRepo(same, *parsed);
  target.branch = BranchOf(requested);
  return target;
}

}  // namespace

ModelTarget ResolveTarget(const std::string& text, const SourceOptions& options) {
  std::error_code ec;
  const fs::path path = fs::absolute(text, ec);
  if (fs::is_directory(path, ec)) {
    if (EnclosingAprfsMount(path / "x")) {
      throw std::runtime_error(text + ": a folder of an aprfs mount; name one of its .apr files");
    }
    ModelTarget target;
    target.label = path.string();
    CatalogOptions catalog;
    catalog.sources = {path.string()};
    target.catalog = catalog;
    return target;
  }
  if (fs::exists(path, ec)) {
    if (std::optional<std::string> mountpoint = EnclosingAprfsMount(path)) {
      return FromMount(*mountpoint, path, options);
    }
    ModelTarget target;
    target.label = path.string();
    target.file = path.string();
    return target;
  }
  // ORG/NAME[@REV], or the short name of a configured repo.
  std::string spec = text;
  if (text.find('/') == std::string::npos) {
    std::string name = text.size() > 4 && text.ends_with(".apr") ? text.substr(0, text.size() - 4)
                                                                   : text;
    spec.clear();
    for (const RemoteRepoSpec& repo : options.ToCatalogOptions().repos) {
      if (repo.repo_id.substr(repo.repo_id.find('/') + 1) == name) {
        spec = repo.repo_id + "@" + repo.revision;
        break;
      }
    }
    if (spec.empty()) {
      throw std::runtime_error(text + ": no such file or folder, and no repo of that name in "
                               "the config file or --repo (give ORG/NAME[@REVISION])");
    }
  }
  std::optional<RemoteRepoSpec> parsed = ParseRepoSpec(spec);
  if (!parsed) {
    throw std::runtime_error(text + ": not a file, a folder or ORG/NAME[@REVISION]");
  }
  ModelTarget target;
  target.label = parsed->repo_id + "@" + parsed->revision;
  target.catalog = OnlyRepo(options, *parsed);
  target.branch = BranchOf(parsed->revision);
  return target;
}

}  // namespace aprfs
