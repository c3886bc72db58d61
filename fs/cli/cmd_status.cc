// `aprfs status [MOUNTPOINT] [--json]`: what a running mount is doing, read from its
// `.aprfs/status.json` (the daemon's own snapshot), for people or scripts.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fs/cli/commands.h"
#include "fs/cli/mount_status.h"
#include "fs/mount/mountinfo.h"

namespace aprfs {
namespace {

using nlohmann::json;

struct StatusArgs {
  std::string mountpoint;
  bool json = false;
};



std::string Text(const json& object, const char* key, const std::string& fallback = "-") {
  const json& value = object.contains(key) ? object[key] : json();
  return value.is_string() ? value.get<std::string>() : fallback;
}

std::string Duration(double seconds) {
  auto s = static_cast<uint64_t>(seconds);
  char text[32];
  if (s >= 86400) {
    std::snprintf(text, sizeof(text), "%llud %02lluh", (unsigned long long)(s / 86400),
                  (unsigned long long)(s % 86400 / 3600));
  } else if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lluh %02llum", (unsigned long long)(s / 3600),
                  (unsigned long long)(s % 3600 / 60));
  } else if (s >= 60) {
    std::snprintf(text, sizeof(text), "%llum %02llus", (unsigned long long)(s / 60),
                  (unsigned long long)(s % 60));
  } else {
    std::snprintf(text, sizeof(text), "%llus", (unsigned long long)s);
  }
  return text;
}

// Percent of the shards' bytes available without the network, rounded down (100% = all).
std::string CachedPercent(const json& model) {
  uint64_t total = 0;
  for (const json& shard : model.value("shards", json::array())) total += JsonCount(shard, "size");
  if (total == 0) return "-";
  uint64_t cached = JsonCount(model, "cached_bytes");
  return std::to_string(static_cast<unsigned>(std::floor(100.0 * cached / total))) + "%";
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

void PrintHuman(const json& status) {
  std::cout << "aprfs " << Text(status, "version") << " at " << Text(status, "mountpoint")
            << " (pid " << JsonCount(status, "pid") << ", up " << Duration(status.value("uptime", 0.0))
            << ")\n";
  std::vector<std::vector<std::string>> rows = {{"MODEL", "SOURCE", "REV", "STATE", "SIZE",
                                                 "CACHED", "READ", "FETCHED", "ERRORS",
                                                 "IN-FLIGHT"}};
  std::vector<std::string> problems;
  for (const json& model : status.value("models", json::array())) {
    std::string name = Text(model, "name", Text(model, "key"));
    std::string state = Text(model, "state");
    bool ready = state == "ready";
    rows.push_back(
        {name, Text(model, "source"), Text(model, "revision").substr(0, 8), state,
         ready ? HumanBytes(JsonCount(model, "size")) : "-", ready ? CachedPercent(model) : "-",
         HumanBytes(JsonCount(model, "bytes_read")), HumanBytes(JsonCount(model, "bytes_fetched")),
         std::to_string(JsonCount(model, "errors")), std::to_string(JsonCount(model, "in_flight"))});
    if (state == "error") problems.push_back(name + ": " + Text(model, "error"));
  }
  if (rows.size() == 1) {
    std::cout << "no models\n";
  } else {
    PrintTable(rows);
  }
  // The files of each model that were opened or computed: views, and .apr files with FP8.
  std::vector<std::vector<std::string>> views = {
      {"FILE", "STATE", "SIZE", "READ", "COMPUTED", "ENCODE", "CACHED", "HITS/MISSES"}};
  for (const json& model : status.value("models", json::array())) {
    for (const json& view : model.value("views", json::array())) {
      const bool computed = JsonCount(view, "bytes_computed") > 0 ||
                            (view.contains("cached_bytes") && view["cached_bytes"].is_number());
      if (Text(view, "state") == "not-planned" || (!computed && Text(view, "state") != "refused")) {
        continue;
      }
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.0f MB/s", view.value("encode_bytes_per_second", 0.0) / 1e6);
      views.push_back({Text(view, "file"), Text(view, "state"),
                       view["size"].is_number() ? HumanBytes(JsonCount(view, "size")) : "-",
                       HumanBytes(JsonCount(view, "bytes_read")),
                       HumanBytes(JsonCount(view, "bytes_computed")), rate,
                       view["cached_bytes"].is_number() ? HumanBytes(JsonCount(view, "cached_bytes")) : "off",
                       std::to_string(JsonCount(view, "cache_hits")) + "/" +
                           std::to_string(JsonCount(view, "cache_misses"))});
      if (Text(view, "state") == "refused") {
        problems.push_back(Text(view, "file") + ": " + Text(view, "error"));
      }
    }
  }
  if (views.size() > 1) {
    std::cout << "\n";
    PrintTable(views);
  }
  for (const std::string& problem : problems) std::cout << "  " << problem << "\n";
}

int RunStatus(const StatusArgs& args) {
  std::vector<std::string> mountpoints;
  if (!args.mountpoint.empty()) {
    std::error_code ec;
    // weakly_canonical stops at what it cannot stat, so a dead mount still gets its message.
    mountpoints.push_back(
        std::filesystem::weakly_canonical(std::filesystem::absolute(args.mountpoint, ec), ec)
            .string());
  } else {
    mountpoints = MountpointsOfType("fuse.aprfs");
    if (mountpoints.empty()) {
      std::cerr << "aprfs status: no aprfs mount found\n";
      return 1;
    }
  }
  int exit_code = 0;
  json all = json::array();
  bool first = true;
  for (const std::string& mountpoint : mountpoints) {
    std::string error;
    std::optional<json> status = ReadMountStatus(mountpoint, &error);
    if (!status) {
      std::cerr << "aprfs status: " << error << "\n";
      exit_code = 1;
      continue;
    }
    if (args.json) {
      all.push_back(*status);
      continue;
    }
    if (!first) std::cout << "\n";
    first = false;
    PrintHuman(*status);
  }
  // One mount named: its document as the daemon wrote it; otherwise a list of them.
  if (args.json && !args.mountpoint.empty() && !all.empty()) std::cout << all[0].dump(2) << "\n";
  if (args.json && args.mountpoint.empty()) std::cout << all.dump(2) << "\n";
  return exit_code;
}

}  // namespace

void RegisterStatus(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* cmd = app.add_subcommand(
      "status", "What a mount is doing: per model source, revision, cache, reads, fetches");
  cmd->add_option("MOUNTPOINT", args->mountpoint,
                  "An aprfs mount (default: every aprfs mount of this machine)");
  cmd->add_flag("--json", args->json,
                "Print the mount's status.json (a JSON list of them without MOUNTPOINT)");
  cmd->callback([args, &exit_code] { exit_code = RunStatus(*args); });
}

}  // namespace aprfs
