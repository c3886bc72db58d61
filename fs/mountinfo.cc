#include "fs/mountinfo.h"

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

}  // namespace

std::optional<MountEntry> FindMount(const std::string& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::optional<MountEntry> found;
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, field, type;
    fields >> id >> parent >> device >> root >> point;
    if (Unescape(point) != path) continue;
    while (fields >> field && field != "-") {
    }
    fields >> type;
    found = MountEntry{device, type};  // later lines are mounted on top
  }
  return found;
}

}  // namespace aprfs
