#include <nlohmann/json.hpp>

#include <iomanip>
#include <iostream>
#include <map>

#include "fs/cli/commands.h"

namespace aprfs {
namespace {

struct LsArgs {
  SourceOptions sources;
  bool json = false;
};

// Every path under which a mount would show each model key.
std::map<std::string, std::vector<std::string>> PathsByKey(const Catalog::Listing& listing) {
  std::map<std::string, std::vector<std::string>> paths;
  for (const auto& [name, key] : listing.top_files) paths[key].push_back(name);
  for (const auto& [org, files] : listing.org_files) {
    for (const auto& [name, key] : files) paths[key].push_back(org + "/" + name);
  }
  return paths;
}

int RunLs(const LsArgs& args) {
  CatalogOptions options;
  try {
    options = args.sources.ToCatalogOptions();
  } catch (const std::exception& e) {
    std::cerr << "aprfs ls: " << e.what() << "\n";
    return 1;
  }
  Catalog catalog(options);
  std::vector<std::shared_ptr<const BuiltModel>> models = catalog.All();
  auto paths = PathsByKey(*catalog.Scan());

  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& model : models) {
      nlohmann::json item = {{"key", model->ref.key},
                             {"dir", model->ref.dir},
                             {"paths", paths[model->ref.key]},
                             {"ok", model->file != nullptr}};
      if (model->file) {
        item["size"] = model->file->size();
        item["shards"] = model->shard_count;
        item["tensors"] = model->file->plan().tensor_count;
        nlohmann::json views = nlohmann::json::array();
        for (ViewKind view : kAllViews) {
          nlohmann::json entry = {{"view", ViewName(view)},
                                  {"file", ViewFileName(model->ref.name, view)}};
          if (std::shared_ptr<VirtualFile> file = model->views->Get(view)) {
            entry["size"] = file->size();
            entry["tensors"] = file->plan().tensor_count;
            entry["values_checked"] = !model->views->Unchecked(view);
          } else {
            entry["error"] = model->views->Error(view);
          }
          views.push_back(entry);
        }
        item["views"] = views;
      } else {
        item["error"] = model->error;
      }
      out.push_back(item);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (models.empty()) {
    std::cout << "no models found\n";
    return 0;
  }
  std::vector<std::string> names;
  size_t width = 4;
  for (const auto& model : models) {
    std::string name;
    for (const std::string& path : paths[model->ref.key]) name += (name.empty() ? "" : " ") + path;
    if (name.empty()) name = "(hidden: name taken) " + model->ref.key;
    width = std::max(width, name.size());
    for (ViewKind view : kAllViews) {
      width = std::max(width, 2 + ViewFileName(model->ref.name, view).size());
    }
    names.push_back(name);
  }
  width += 2;
  std::cout << std::left << std::setw(static_cast<int>(width)) << "NAME" << std::setw(12) << "SIZE"
            << std::setw(8) << "SHARDS" << "TENSORS\n";
  for (size_t i = 0; i < models.size(); ++i) {
    const auto& model = models[i];
    std::cout << std::setw(static_cast<int>(width)) << names[i];
    if (!model->file) {
      std::cout << "rejected: " << model->error << "\n";
      continue;
    }
    std::cout << std::setw(12) << HumanBytes(model->file->size()) << std::setw(8)
              << model->shard_count << model->file->plan().tensor_count << "\n";
    // Every view with its exact size (in bytes: what stat will say), or why there is none.
    for (ViewKind view : kAllViews) {
      if (view == ViewKind::kApr) continue;
      std::cout << "  " << std::setw(static_cast<int>(width) - 2) << ViewFileName(model->ref.name, view);
      if (std::shared_ptr<VirtualFile> file = model->views->Get(view)) {
        std::cout << std::setw(12) << HumanBytes(file->size()) << file->size() << " bytes"
                  << (model->views->Unchecked(view) ? " (values checked on first open)" : "")
                  << "\n";
      } else {
        std::cout << "not offered: " << model->views->Error(view) << "\n";
      }
    }
  }
  return 0;
}

}  // namespace

void RegisterLs(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<LsArgs>();
  CLI::App* cmd = app.add_subcommand("ls", "List the models a mount would show, or why not");
  args->sources.AddTo(*cmd);
  cmd->add_flag("--json", args->json, "Machine-readable output");
  cmd->callback([args, &exit_code] { exit_code = RunLs(*args); });
}

}  // namespace aprfs
