#pragma once

#include <string>

namespace aprfs {

// Whether /etc/fuse.conf (or `path`) has a `user_allow_other` line, which fusermount3 requires
// before it lets a user other than root mount with allow_other or allow_root.
bool FuseConfAllowsOther(const std::string& path = "/etc/fuse.conf");

}  // namespace aprfs
