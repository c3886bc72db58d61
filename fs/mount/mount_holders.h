#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace aprfs {

// A process that keeps a mount busy, and how.
struct MountHolder {
  pid_t pid = 0;
  std::string name;  // /proc/PID/comm: "python3"
  std::string how;   // "open file", "working directory", "root directory", "mapped file"
  std::string path;  // the path under the mountpoint
};

// Scans /proc/*/{fd,cwd,root,maps} for paths at or under `mountpoint`. Only the processes the
// caller may inspect are seen (all of them for root). Never touches the mount itself: the
// kernel names the paths.
std::vector<MountHolder> FindMountHolders(const std::string& mountpoint);

// "held by PID 1234 (python3): open file /mnt/x.apr"
std::string DescribeHolder(const MountHolder& holder);

}  // namespace aprfs
