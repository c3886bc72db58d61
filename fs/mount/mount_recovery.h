#pragma once

#include <string>
#include <vector>

namespace aprfs {

// What is mounted at a mountpoint before `aprfs mount` mounts there.
enum class ExistingMount {
  kNone,     // nothing: mount normally
  kOther,    // some other filesystem (mounting on top is the caller's business)
  kLive,     // a working aprfs mount
  kDead,     // an aprfs mount whose daemon is gone: stat() gives ENOTCONN
  kHanging,  // an aprfs mount that does not answer stat() within a few seconds
};

// Reads mountinfo, then (for aprfs mounts only) asks the daemon for a statfs() from a helper
// thread, so a stopped daemon cannot hang the caller.
ExistingMount ProbeExistingMount(const std::string& mountpoint);

// Lazily detaches a dead mount: umount2(MNT_DETACH) as root, `fusermount3 -uz` otherwise.
// Returns an empty string on success, else why it failed.
std::string DetachDeadMount(const std::string& mountpoint);

// Runs a program found in PATH; returns its exit code, or -1 if it could not start.
int RunProgram(const std::vector<std::string>& argv);

}  // namespace aprfs
