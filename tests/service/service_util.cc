#include "tests/service/service_util.h"

#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace aprfs_stest {
namespace fs = std::filesystem;

namespace {

const char* const kSavedHelper = "/sbin/mount.fuse.aprfs.aprfs-test-saved";
const char* const kFuseConf = "/etc/fuse.conf";
const char* const kFuseConfBackup = "/etc/fuse.conf.aprfs-test-backup";
const char* const kFuseConfAbsent = "/etc/fuse.conf.aprfs-test-absent";
const char* const kUserName = "aprfs-test";

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> Cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

}  // namespace

// ----- /sbin/mount.fuse.aprfs ------------------------------------------------------------------

HelperSymlink::HelperSymlink() {
  if (Exists(kSavedHelper)) {
    // A previous run died before restoring: what is at kHelperPath is its link.
    unlink(kHelperPath);
    saved_ = kSavedHelper;
  } else if (Exists(kHelperPath)) {
    if (rename(kHelperPath, kSavedHelper) != 0) {
      ADD_FAILURE() << "cannot move the existing " << kHelperPath << " aside: " << std::strerror(errno);
      return;
    }
    saved_ = kSavedHelper;
  }
  if (symlink(AprfsBinary().c_str(), kHelperPath) != 0) {
    ADD_FAILURE() << "cannot create " << kHelperPath << " -> " << AprfsBinary() << ": "
                  << std::strerror(errno);
  }
}

HelperSymlink::~HelperSymlink() {
  unlink(kHelperPath);
  if (!saved_.empty() && rename(saved_.c_str(), kHelperPath) != 0) {
    ADD_FAILURE() << "cannot restore " << kHelperPath << " from " << saved_ << ": "
                  << std::strerror(errno);
  }
}

// ----- /etc/fuse.conf -------------------------------------------------------------------------

FuseConfGuard::FuseConfGuard() {
  // A previous run died before restoring: put its backup back first.
  if (Exists(kFuseConfBackup)) {
    rename(kFuseConfBackup, kFuseConf);
  } else if (Exists(kFuseConfAbsent)) {
    unlink(kFuseConf);
    unlink(kFuseConfAbsent);
  }
  existed_ = Exists(kFuseConf);
  if (existed_) {
    original_ = SlurpOrEmpty(kFuseConf);
    WriteText(kFuseConfBackup, original_);
  } else {
    WriteText(kFuseConfAbsent, "");
  }
}

void FuseConfGuard::Write(const std::string& text) { WriteText(kFuseConf, text); }

FuseConfGuard::~FuseConfGuard() {
  if (existed_) {
    WriteText(kFuseConf, original_);
    if (SlurpOrEmpty(kFuseConf) != original_) ADD_FAILURE() << "could not restore " << kFuseConf;
    unlink(kFuseConfBackup);
  } else {
    unlink(kFuseConf);
    unlink(kFuseConfAbsent);
  }
}

// ----- /dev/fuse -------------------------------------------------------------------------------

DevFuseGuard::DevFuseGuard() {
  struct stat st;
  if (stat("/dev/fuse", &st) != 0 || (st.st_mode & 0666) == 0666) return;
  saved_mode_ = static_cast<int>(st.st_mode & 07777);
  if (chmod("/dev/fuse", 0666) != 0) ADD_FAILURE() << "chmod /dev/fuse: " << std::strerror(errno);
}

DevFuseGuard::~DevFuseGuard() {
  if (saved_mode_ >= 0 && chmod("/dev/fuse", static_cast<mode_t>(saved_mode_)) != 0) {
    ADD_FAILURE() << "cannot restore the mode of /dev/fuse: " << std::strerror(errno);
  }
}

// ----- the unprivileged user --------------------------------------------------------------------

TestUser::TestUser() {
  passwd* entry = getpwnam(kUserName);
  if (entry == nullptr) {
    ProcResult r = RunCommand({"useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", kUserName},
                              30s);
    if (r.exit_code != 0) {
      ADD_FAILURE() << "cannot create user " << kUserName << ": " << r.Describe();
      return;
    }
    created_ = true;
    entry = getpwnam(kUserName);
  }
  if (entry == nullptr) return;
  uid_ = entry->pw_uid;
  gid_ = entry->pw_gid;
}

TestUser::~TestUser() {
  if (created_) RunCommand({"userdel", kUserName}, 30s);
}

ProcResult TestUser::Run(const std::vector<std::string>& argv, const std::string& home,
                         Millis timeout) const {
  std::vector<std::string> full = {"setpriv",
                                   "--reuid=" + std::to_string(uid_),
                                   "--regid=" + std::to_string(gid_),
                                   "--clear-groups",
                                   "--inh-caps=-all",
                                   "env",
                                   "-i",
                                   "HOME=" + home,
                                   "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"};
  full.insert(full.end(), argv.begin(), argv.end());
  return RunCommand(full, timeout);
}

// ----- daemons and mounts -----------------------------------------------------------------------

std::vector<pid_t> FindDaemons(const std::string& mountpoint) {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    std::vector<std::string> args = Cmdline(static_cast<pid_t>(pid));
    if (args.empty()) continue;
    std::string name = fs::path(args[0]).filename();
    if (name != "aprfs" && name != "mount.fuse.aprfs") continue;
    if (std::find(args.begin(), args.end(), mountpoint) == args.end()) continue;
    if (ProcessAlive(static_cast<pid_t>(pid))) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

bool WaitNoDaemons(const std::string& mountpoint, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!FindDaemons(mountpoint).empty()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::string ForceCleanup(const std::string& mountpoint) {
  std::string done;
  for (pid_t pid : FindDaemons(mountpoint)) {
    done += "killed daemon " + std::to_string(pid) + "; ";
    kill(pid, SIGKILL);
  }
  for (int i = 0; i < 8 && FindMount(mountpoint); ++i) {
    done += "detached " + mountpoint + "; ";
    umount2(mountpoint.c_str(), MNT_DETACH);
  }
  WaitNoDaemons(mountpoint, 5s);
  return done;
}

std::optional<MountDetails> ReadMountDetails(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<MountDetails> found;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, options, field;
    fields >> id >> parent >> device >> root >> point >> options;
    if (point != mountpoint) continue;
    while (fields >> field && field != "-") {
    }
    MountDetails details;
    details.options = options;
    fields >> details.fstype >> details.source >> details.super_options;
    found = details;
  }
  return found;
}

int CountMounts(const std::string& mountpoint) {
  int count = 0;
  for (const MountEntry& m : ReadMountInfo()) count += m.mountpoint == mountpoint;
  return count;
}

void ServiceTest::TearDown() {
  const std::string point = mountpoint();
  MountTest::TearDown();
  std::string forced = ForceCleanup(point);
  if (!forced.empty()) ADD_FAILURE() << "teardown had to clean up: " << forced;
}

// ----- models -----------------------------------------------------------------------------------

ExpectedTensors WriteSmallModel(const std::string& dir, const std::string& name, uint32_t seed) {
  tw::TestModel model = tw::LlamaLikeModel(1, 2, true, seed);
  tw::WriteModel(dir + "/" + name, model);
  return ExpectedOf(model);
}

void ExpectModelReads(const std::string& apr_path, const ExpectedTensors& expected) {
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(apr_path, &bytes, &error)) << apr_path << ": " << error;
  AprLayout layout = ParseAprBytes(bytes);
  ASSERT_NO_FATAL_FAILURE(ExpectLayoutMatches(layout, expected));
  ExpectTensorBytes(layout, expected, bytes, "read() of " + apr_path);
}

std::string BuildDir() { return APRFS_BUILD_DIR; }
std::string SourceDir() { return APRFS_SOURCE_DIR; }

}  // namespace aprfs_stest
