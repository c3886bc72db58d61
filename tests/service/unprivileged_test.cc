// aprfs as a normal user: the mount goes through fusermount3, and allow_other needs
// user_allow_other in /etc/fuse.conf (checked before anything is started).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/service/service_util.h"

namespace aprfs_stest {
namespace {

class UnprivilegedTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    ASSERT_TRUE(user_.ok()) << "no unprivileged user to test with";
    // The user reads the models and owns the mountpoint and a home folder; the scratch folder
    // made by mkdtemp is root's only.
    ASSERT_EQ(chmod(root().c_str(), 0755), 0);
    ASSERT_EQ(chown(mountpoint().c_str(), user_.uid(), user_.gid()), 0);
    ASSERT_EQ(chown(work_dir().c_str(), user_.uid(), user_.gid()), 0);
    // The build tree may sit in a folder only root can enter (a clone under `mktemp -d`): the
    // user runs copies of the binary and the checker from the scratch folder.
    std::error_code ec;
    std::filesystem::copy_file(AprfsBinary(), UserAprfs(), ec);
    ASSERT_FALSE(ec) << ec.message();
    std::filesystem::copy_file(ToolsDir() + "/aprcheck.py", root() + "/aprcheck.py", ec);
    ASSERT_FALSE(ec) << ec.message();
  }
  std::string UserAprfs() const { return root() + "/aprfs"; }
  ProcResult AsUser(const std::vector<std::string>& argv, Millis timeout = 60s) {
    return user_.Run(argv, work_dir(), timeout);
  }
  ProcResult UserMount(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {UserAprfs(), "mount", mountpoint(), "--no-hf-cache",
                                     "--source", models_dir()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return AsUser(argv);
  }
  // The user's own reader: aprcheck.py compares every tensor with the source shards.
  void ExpectUserReads(const std::string& apr, const std::string& model_dir) {
    ProcResult check = AsUser({"python3", root() + "/aprcheck.py", apr, "--source", model_dir}, 90s);
    EXPECT_EQ(check.exit_code, 0) << check.Describe();
  }
  DevFuseGuard dev_fuse_;
  TestUser user_;
};

TEST_F(UnprivilegedTest, UserMountsReadsAndUnmountsThroughFusermount) {
  WriteSmallModel(models_dir(), "mine", 41);
  AdoptMount(mountpoint());
  ProcResult r = UserMount();
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::optional<MountDetails> details = ReadMountDetails(mountpoint());
  ASSERT_TRUE(details.has_value());
  EXPECT_EQ(details->fstype, "fuse.aprfs");
  EXPECT_NE(details->super_options.find("user_id=" + std::to_string(user_.uid())), std::string::npos)
      << "not the user's mount: " << details->super_options;
  EXPECT_EQ(details->super_options.find("allow_other"), std::string::npos)
      << "a user's mount must not be shared unless asked";
  ExpectUserReads(MP("mine.apr"), Model("mine"));

  ProcResult umount = AsUser({UserAprfs(), "umount", mountpoint()});
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
  EXPECT_TRUE(WaitNoDaemons(mountpoint(), 10s));
}

TEST_F(UnprivilegedTest, UserReplacesItsOwnDeadMount) {
  WriteSmallModel(models_dir(), "again", 42);
  AdoptMount(mountpoint());
  ASSERT_EQ(UserMount().exit_code, 0);
  std::vector<pid_t> daemons = FindDaemons(mountpoint());
  ASSERT_EQ(daemons.size(), 1u);
  kill(daemons[0], SIGKILL);
  ASSERT_TRUE(WaitNoDaemons(mountpoint(), 10s));
  ProcResult r = UserMount();
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.err.find("replaced a dead aprfs mount"), std::string::npos) << r.Describe();
  EXPECT_EQ(CountMounts(mountpoint()), 1);
  ExpectUserReads(MP("again.apr"), Model("again"));
  EXPECT_EQ(AsUser({UserAprfs(), "umount", mountpoint()}).exit_code, 0);
  EXPECT_TRUE(WaitNoDaemons(mountpoint(), 10s));
}

TEST_F(UnprivilegedTest, AllowOtherNeedsUserAllowOtherInFuseConf) {
  ExpectedTensors expected = WriteSmallModel(models_dir(), "shared", 43);
  AdoptMount(mountpoint());
  FuseConfGuard conf;
  conf.Write("# written by aprfs's service tests\n#user_allow_other\nmount_max = 1000\n");
  ProcResult refused = UserMount({"-o", "allow_other"});
  EXPECT_EQ(refused.exit_code, 1) << refused.Describe();
  EXPECT_NE(refused.err.find("allow_other needs user_allow_other in /etc/fuse.conf"),
            std::string::npos)
      << refused.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
  EXPECT_TRUE(FindDaemons(mountpoint()).empty()) << "a daemon was started anyway";

  conf.Write("user_allow_other\n");
  ProcResult shared = UserMount({"-o", "allow_other"});
  ASSERT_EQ(shared.exit_code, 0) << shared.Describe();
  // Shared: root, another user, reads it.
  ExpectModelReads(MP("shared.apr"), expected);
  EXPECT_EQ(AsUser({UserAprfs(), "umount", mountpoint()}).exit_code, 0);
  EXPECT_TRUE(WaitNoDaemons(mountpoint(), 10s));
}

}  // namespace
}  // namespace aprfs_stest
