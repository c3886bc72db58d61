#include "fs/mount/mount_holders.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace aprfs {
namespace {

std::string ReadLink(const std::string& path) {
  char target[4096];
  ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

bool IsUnder(const std::string& path, const std::string& mountpoint) {
  return path == mountpoint || (path.size() > mountpoint.size() &&
                                path.compare(0, mountpoint.size(), mountpoint) == 0 &&
                                (mountpoint.back() == '/' || path[mountpoint.size()] == '/'));
}

std::vector<pid_t> ListPids() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (pid > 0 && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

// Paths of the file mappings: the sixth field of /proc/PID/maps, if it is absolute.
std::set<std::string> MappedPaths(const std::string& maps_file) {
  std::set<std::string> paths;
  std::ifstream maps(maps_file);
  std::string line;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    const std::string deleted = " (deleted)";
    if (path.size() > deleted.size() && path.ends_with(deleted)) path.resize(path.size() - deleted.size());
    paths.insert(path);
  }
  return paths;
}

}  // namespace

std::vector<MountHolder> FindMountHolders(const std::string& mountpoint) {
  std::vector<MountHolder> holders;
  const pid_t self = getpid();
  for (pid_t pid : ListPids()) {
    if (pid == self) continue;
    const std::string dir = "/proc/" + std::to_string(pid);
    std::string name;
    std::getline(std::ifstream(dir + "/comm"), name);
    auto add = [&](const std::string& how, const std::string& path) {
      holders.push_back({pid, name, how, path});
    };
    if (std::string cwd = ReadLink(dir + "/cwd"); IsUnder(cwd, mountpoint)) add("working directory", cwd);
    if (std::string root = ReadLink(dir + "/root"); IsUnder(root, mountpoint)) add("root directory", root);
    if (DIR* fds = opendir((dir + "/fd").c_str())) {
      while (dirent* entry = readdir(fds)) {
        if (entry->d_name[0] == '.') continue;
        std::string target = ReadLink(dir + "/fd/" + entry->d_name);
        if (IsUnder(target, mountpoint)) add("open file", target);
      }
      closedir(fds);
    }
    for (const std::string& path : MappedPaths(dir + "/maps")) {
      if (IsUnder(path, mountpoint)) add("mapped file", path);
    }
  }
  return holders;
}

std::string DescribeHolder(const MountHolder& holder) {
  return "held by PID " + std::to_string(holder.pid) + " (" + holder.name + "): " + holder.how +
         " " + holder.path;
}

}  // namespace aprfs
