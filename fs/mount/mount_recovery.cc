#include "fs/mount/mount_recovery.h"

#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "fs/mount/mountinfo.h"

extern char** environ;

namespace aprfs {

ExistingMount ProbeExistingMount(const std::string& mountpoint) {
  std::optional<MountEntry> mount = FindMount(mountpoint);
  if (!mount) return ExistingMount::kNone;
  if (mount->type != "fuse.aprfs") return ExistingMount::kOther;
  // statfs(), not stat(): the kernel answers stat() of a dead mount's root from its attribute
  // cache for a while, statfs() always asks the daemon. A stopped daemon leaves the call
  // waiting; the thread is abandoned then, and the kernel ends its request when this process
  // exits.
  auto probe = std::make_shared<std::promise<int>>();
  std::future<int> result = probe->get_future();
  std::thread prober([probe, mountpoint] {
    struct statfs st;
    probe->set_value(statfs(mountpoint.c_str(), &st) == 0 ? 0 : errno);
  });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    prober.detach();  // only `aprfs mount` refusing to go on: it exits, it never forks
    return ExistingMount::kHanging;
  }
  // Joined, not left to finish on its own: the caller forks the daemon next, and a fork while
  // that thread still exits can copy a lock it holds into the child, which then hangs (TSan
  // saw `aprfs mount` wait forever for a daemon stuck before its mount).
  prober.join();
  int err = result.get();
  if (err == ENOTCONN || err == ECONNABORTED) return ExistingMount::kDead;
  return ExistingMount::kLive;
}

int RunProgram(const std::vector<std::string>& argv) {
  std::vector<char*> raw;
  for (const std::string& arg : argv) raw.push_back(const_cast<char*>(arg.c_str()));
  raw.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, raw[0], nullptr, nullptr, raw.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

std::string DetachDeadMount(const std::string& mountpoint) {
  if (geteuid() == 0) {
    if (umount2(mountpoint.c_str(), MNT_DETACH) == 0) return "";
    return std::string("umount2(MNT_DETACH): ") + std::strerror(errno);
  }
  int code = RunProgram({"fusermount3", "-uz", mountpoint});
  if (code == 0) return "";
  return code < 0 ? "cannot run fusermount3" : "fusermount3 -uz failed (exit code " + std::to_string(code) + ")";
}

}  // namespace aprfs
