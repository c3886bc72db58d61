// Crash recovery: a killed daemon's dead mount is replaced by the next `aprfs mount`; a live one
// is refused; `aprfs umount` of a busy mount names the processes that hold it.
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/service/service_util.h"

extern char** environ;

namespace aprfs_stest {
namespace {

// Processes started by a test, killed and reaped whatever happens.
class Holders {
 public:
  ~Holders() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  pid_t Start(const std::vector<std::string>& argv) {
    std::vector<std::string> copy = argv;
    std::vector<char*> raw;
    for (std::string& a : copy) raw.push_back(a.data());
    raw.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawnp(&pid, raw[0], nullptr, nullptr, raw.data(), environ) != 0) return -1;
    pids_.push_back(pid);
    return pid;
  }

 private:
  std::vector<pid_t> pids_;
};

// Waits until /proc/PID/{fd,cwd,maps} show `path`.
bool WaitHolds(pid_t pid, const std::string& path, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string dir = "/proc/" + std::to_string(pid);
  while (std::chrono::steady_clock::now() < deadline) {
    if (SlurpOrEmpty(dir + "/maps").find(path) != std::string::npos) return true;
    std::error_code ec;
    if (std::filesystem::read_symlink(dir + "/cwd", ec).string() == path) return true;
    for (const auto& fd : std::filesystem::directory_iterator(dir + "/fd", ec)) {
      if (std::filesystem::read_symlink(fd.path(), ec).string() == path) return true;
    }
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

TEST_F(ServiceTest, KilledDaemonsDeadMountIsReplacedByTheNextMount) {
  ExpectedTensors expected = WriteSmallModel(models_dir(), "crash", 31);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ASSERT_EQ(kill(daemon_pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitDaemonExit(10s).has_value());
  // The kernel may answer stat() of the root from its cache for a second; a listing asks.
  // ENOTCONN, or ECONNABORTED once the connection was aborted (through
  // /sys/fs/fuse/connections, by anything on the machine that cleans up dead mounts).
  std::error_code ec;
  std::filesystem::directory_iterator listing(mountpoint(), ec);
  ASSERT_TRUE(ec.value() == ENOTCONN || ec.value() == ECONNABORTED)
      << "a killed daemon's mount should fail with ENOTCONN, got " << ec.message();
  ASSERT_TRUE(IsAprfsMounted(mountpoint())) << "the dead mount should still be listed";

  AdoptMount(mountpoint());
  const std::string log = root() + "/recover.log";
  ProcResult r = RunAprfs({"mount", mountpoint(), "--no-hf-cache", "--source", models_dir(),
                           "--log-file", log},
                          60s);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.err.find("replaced a dead aprfs mount"), std::string::npos) << r.Describe();
  EXPECT_NE(SlurpOrEmpty(log).find("replaced a dead aprfs mount"), std::string::npos)
      << "the daemon's log does not say what was done:\n" << SlurpOrEmpty(log);
  EXPECT_EQ(CountMounts(mountpoint()), 1) << "the dead mount is still stacked underneath";
  ExpectModelReads(MP("crash.apr"), expected);

  ProcResult umount = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
  EXPECT_EQ(CountMounts(mountpoint()), 0);
  EXPECT_TRUE(WaitNoDaemons(mountpoint(), 10s));
}

// kill -9 right as a foreground daemon comes up, while it checks its own mount for readiness:
// the daemon must die. A daemon that stat()s its own mountpoint in one of its threads and is
// killed mid-request stays an unkillable zombie holding the mount.
TEST_F(ServiceTest, KillDuringStartupNeverLeavesAnUnkillableDaemon) {
  WriteSmallModel(models_dir(), "k", 34);
  AdoptMount(mountpoint());
  for (int round = 0; round < 15; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<std::string> argv = {AprfsBinary(), "mount", "-f", mountpoint(), "--no-hf-cache",
                                     "--source", models_dir(), "--log-file", root() + "/k.log"};
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    pid_t daemon = -1;
    ASSERT_EQ(posix_spawn(&daemon, raw[0], nullptr, nullptr, raw.data(), environ), 0);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!IsAprfsMounted(mountpoint()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    std::optional<aprfs_itest::MountEntry> entry = FindMount(mountpoint());
    kill(daemon, SIGKILL);
    int status = 0;
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {
      gone = waitpid(daemon, &status, WNOHANG) == daemon;
      if (!gone) std::this_thread::sleep_for(10ms);
    }
    if (!gone && entry) {
      // Rescue, so the machine is not left with a stuck process: abort the FUSE connection.
      std::string minor = entry->device.substr(entry->device.find(':') + 1);
      mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr);  // if not there yet
      std::ofstream("/sys/fs/fuse/connections/" + minor + "/abort") << "1";
      waitpid(daemon, &status, 0);
    }
    for (int i = 0; i < 4 && FindMount(mountpoint()); ++i) umount2(mountpoint().c_str(), MNT_DETACH);
    ASSERT_TRUE(gone) << "the killed daemon is stuck (its own request to its own mount)";
  }
}

TEST_F(ServiceTest, ALiveMountIsNotMountedOver) {
  ExpectedTensors expected = WriteSmallModel(models_dir(), "live", 32);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ProcResult r = RunAprfs({"mount", mountpoint(), "--no-hf-cache", "--source", models_dir()}, 60s);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("already mounted"), std::string::npos) << r.Describe();
  EXPECT_EQ(CountMounts(mountpoint()), 1);
  EXPECT_TRUE(DaemonAlive());
  ExpectModelReads(MP("live.apr"), expected);
}

TEST_F(ServiceTest, BusyUmountNamesWhatHoldsTheMount) {
  WriteSmallModel(models_dir(), "held", 33);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string file = MP("held.apr");
  Holders holders;
  pid_t reader = holders.Start(
      {"python3", "-c", "import sys, time\nf = open(sys.argv[1], 'rb')\ntime.sleep(120)", file});
  pid_t mapper = holders.Start(
      {"python3", "-c",
       "import mmap, sys, time\nf = open(sys.argv[1], 'rb')\n"
       "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\nf.close()\ntime.sleep(120)",
       file});
  pid_t sitter = holders.Start({"sh", "-c", "cd \"$0\" && exec sleep 120", mountpoint()});
  ASSERT_TRUE(WaitHolds(reader, file, 20s));
  ASSERT_TRUE(WaitHolds(mapper, file, 20s));
  ASSERT_TRUE(WaitHolds(sitter, mountpoint(), 20s));

  ProcResult r = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("busy: held by PID " + std::to_string(reader) + " (python3): open file " + file),
            std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("held by PID " + std::to_string(mapper) + " (python3): mapped file " + file),
            std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("held by PID " + std::to_string(sitter) + " (sleep): working directory " +
                       mountpoint()),
            std::string::npos)
      << r.Describe();
  EXPECT_TRUE(IsAprfsMounted(mountpoint()));
}

}  // namespace
}  // namespace aprfs_stest
