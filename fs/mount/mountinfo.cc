#include "fs/mount/mountinfo.h"

#include <fstream>
#include <sstream>

namespace aprfs {
namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string Unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      out += static_cast<char>(std::stoi(field.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// One parsed line of mountinfo.
struct MountLine {
  std::string point;
  MountEntry entry;
};

std::vector<MountLine> ReadMountinfo() {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::vector<MountLine> lines;
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, field, type;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> field && field != "-") {
    }
    fields >> type;
    lines.push_back({Unescape(point), MountEntry{device, type}});
  }
  return lines;
}

}  // namespace

std::optional<MountEntry> FindMount(const std::string& path) {
  std::optional<MountEntry> found;
  for (const MountLine& line : ReadMountinfo()) {
    if (line.point == path) found = line.entry;  // later lines are mounted on top
  }
  return found;
}

std::vector<std::string> MountpointsOfType(const std::string& type) {
  std::vector<std::string> points;
  for (const MountLine& line : ReadMountinfo()) {
    if (line.entry.type == type) points.push_back(line.point);
  }
  return points;
}

}  // namespace aprfs
