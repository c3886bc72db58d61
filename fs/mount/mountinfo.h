#pragma once

#include <optional>
#include <string>
#include <vector>

namespace aprfs {

// What /proc/self/mountinfo says is mounted exactly at a path (the topmost mount).
struct MountEntry {
  std::string device;  // "major:minor", which names the mount's bdi in /sys/class/bdi
  std::string type;    // "fuse.aprfs", "tmpfs"...
};

// Reads mountinfo only, so it never touches the mount itself (a stat of a FUSE mountpoint from
// inside its own daemon, or of a dead one, would block or fail).
std::optional<MountEntry> FindMount(const std::string& path);

// Every mountpoint of that type ("fuse.aprfs"), in mount order; from mountinfo only.
std::vector<std::string> MountpointsOfType(const std::string& type);

}  // namespace aprfs
