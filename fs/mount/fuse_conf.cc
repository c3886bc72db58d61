#include "fs/mount/fuse_conf.h"

#include <fstream>

namespace aprfs {

// fusermount3 reads the file line by line; leading and trailing blanks are ignored, '#' starts
// a comment line.
bool FuseConfAllowsOther(const std::string& path) {
  std::ifstream conf(path);
  std::string line;
  while (std::getline(conf, line)) {
    size_t begin = line.find_first_not_of(" \t");
    size_t end = line.find_last_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    if (line.compare(begin, end - begin + 1, "user_allow_other") == 0) return true;
  }
  return false;
}

}  // namespace aprfs
