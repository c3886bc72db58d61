#pragma once

// Machinery of the service tests (label `service`): they mount through mount(8), fstab,
// systemd's notify protocol and as a normal user, so they change the system for a while. Each
// change is undone by an RAII guard, also when a test fails half-way:
//  * HelperSymlink puts /sbin/mount.fuse.aprfs -> the build's binary, and restores whatever
//    was there (a stale link, an installed helper) or removes it;
//  * FuseConfGuard rewrites /etc/fuse.conf and restores it (a backup file survives a crash of
//    the test binary and is restored by the next run);
//  * DevFuseGuard opens /dev/fuse to every user, as udev does, and restores its mode;
//  * TestUser creates the system user `aprfs-test` if it is absent, and deletes it if it did.

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/integration/mount_fixture.h"

namespace aprfs_stest {

using namespace aprfs_itest;

inline constexpr const char* kHelperPath = "/sbin/mount.fuse.aprfs";

class HelperSymlink {
 public:
  HelperSymlink();  // fails the test (ADD_FAILURE) if it cannot install the link
  ~HelperSymlink();
  HelperSymlink(const HelperSymlink&) = delete;
  HelperSymlink& operator=(const HelperSymlink&) = delete;

 private:
  std::string saved_;  // where a previous helper was moved, or empty
};

class FuseConfGuard {
 public:
  FuseConfGuard();
  ~FuseConfGuard();
  void Write(const std::string& text);
  FuseConfGuard(const FuseConfGuard&) = delete;
  FuseConfGuard& operator=(const FuseConfGuard&) = delete;

 private:
  bool existed_ = false;
  std::string original_;
};

// /dev/fuse readable and writable by everyone, as udev makes it on Debian (libfuse opens it as
// the user before calling fusermount3). Some containers create it 0600; the mode is restored.
class DevFuseGuard {
 public:
  DevFuseGuard();
  ~DevFuseGuard();
  DevFuseGuard(const DevFuseGuard&) = delete;
  DevFuseGuard& operator=(const DevFuseGuard&) = delete;

 private:
  int saved_mode_ = -1;  // -1: left alone
};

// A user without privileges; runs commands as it through setpriv.
class TestUser {
 public:
  TestUser();
  ~TestUser();
  TestUser(const TestUser&) = delete;
  TestUser& operator=(const TestUser&) = delete;
  bool ok() const { return uid_ > 0; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  // argv run as the user, with HOME=home and a minimal environment.
  ProcResult Run(const std::vector<std::string>& argv, const std::string& home,
                 Millis timeout = 60s) const;

 private:
  bool created_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// aprfs daemons (started as `aprfs` or as the mount helper) whose command line names the
// mountpoint.
std::vector<pid_t> FindDaemons(const std::string& mountpoint);
// Kills what FindDaemons finds and detaches the mountpoint if it is still mounted; returns a
// description of what had to be done (empty when nothing was left).
std::string ForceCleanup(const std::string& mountpoint);
// Waits until no daemon of the mountpoint is left.
bool WaitNoDaemons(const std::string& mountpoint, Millis timeout);
// The mount options field (6th) of the mountpoint's mountinfo line and its source (after "-").
struct MountDetails {
  std::string options;        // "ro,nosuid,nodev,relatime"
  std::string fstype;         // "fuse.aprfs"
  std::string source;         // "aprfs" or the fsname
  std::string super_options;  // "ro,user_id=0,group_id=0,allow_other"
};
std::optional<MountDetails> ReadMountDetails(const std::string& mountpoint);

// How many mountinfo lines name this mountpoint (mounts stacked there).
int CountMounts(const std::string& mountpoint);

// The fixture of the service tests: MountTest's scratch folder, watchdog and teardown, plus a
// last sweep for daemons started through the mount helper (MountTest knows only `aprfs`).
class ServiceTest : public MountTest {
 protected:
  void TearDown() override;
};

// Writes a two-shard model called `name` into dir/name and returns what it must contain.
ExpectedTensors WriteSmallModel(const std::string& dir, const std::string& name, uint32_t seed);
// Reads the whole file and checks every tensor (layout, bytes), with gtest.
void ExpectModelReads(const std::string& apr_path, const ExpectedTensors& expected);

std::string BuildDir();   // the CMake build folder (holds the units generated for tests)
std::string SourceDir();  // the source tree

}  // namespace aprfs_stest
