#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fs/namespace.h"

namespace aprfs {

struct FuseMountOptions {
  std::string mountpoint;
  std::vector<std::string> fuse_options;  // extra -o options passed to libfuse
  unsigned max_threads = 16;
};

// Mounts `ns` at the mountpoint and serves it until unmounted or signalled. `ready` is called
// once the mount is live (true) or has failed (false, with a message). Returns 0 on a clean
// exit.
int ServeFuse(Namespace& ns, const FuseMountOptions& options,
              const std::function<void(bool ok, const std::string& message)>& ready);

}  // namespace aprfs
