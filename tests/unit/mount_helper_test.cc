// mount(8)'s helper call and -o options turned into `aprfs mount` arguments (fs/mount_helper.h),
// and the /etc/fuse.conf rule for allow_other (fs/fuse_conf.h).
#include "fs/cli/mount_helper.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fs/mount/fuse_conf.h"

namespace aprfs {
namespace {

using Args = std::vector<std::string>;

std::string ErrorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MountHelper, AprfsOptionsBecomeCliOptions) {
  TranslatedOptions t = TranslateOptions(
      {"source=/a,repo=org/m@v1,source=/b", "hf_cache=/h,no_hf_cache,config=/c.json,cache_dir=/d,"
       "cache_size=10G,max_connections=4,log_level=debug,log_file=/l,foreground"},
      false);
  EXPECT_EQ(t.cli_args, (Args{"--source", "/a", "--repo", "org/m@v1", "--source", "/b",
                              "--hf-cache", "/h", "--no-hf-cache", "--config", "/c.json",
                              "--cache-dir", "/d", "--cache-size", "10G", "--max-connections",
                              "4", "--log-level", "debug", "--log-file", "/l", "--foreground"}));
  EXPECT_TRUE(t.fuse_options.empty());
}

TEST(MountHelper, MountOnlyOptionsAreDroppedAndFuseOptionsKept) {
  TranslatedOptions t = TranslateOptions(
      {"rw,defaults,_netdev,nofail,noauto,auto,user,users,comment=x,x-systemd.automount,"
       "x-systemd.idle-timeout=60,_foo=1,subtype=aprfs",
       "ro,allow_other,nosuid,nodev,noexec,noatime,default_permissions,max_read=131072,fsname=m"},
      false);
  EXPECT_TRUE(t.cli_args.empty());
  EXPECT_EQ(t.fuse_options, (Args{"ro", "allow_other", "nosuid", "nodev", "noexec", "noatime",
                                  "default_permissions", "max_read=131072", "fsname=m"}));
}

TEST(MountHelper, BadOptionsNameTheOptionAndTheRule) {
  EXPECT_NE(ErrorOf([] { TranslateOptions({"source=/a,bogus=1"}, false); })
                .find("unknown mount option 'bogus=1'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateOptions({"source"}, false); }).find("'source' needs a value"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateOptions({"source="}, false); }).find("'source' needs a value"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateOptions({"no_hf_cache=1"}, false); }).find("takes no value"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateOptions({"subtype=sshfs"}, false); }).find("always fuse.aprfs"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateOptions({"allow_other=1"}, false); }).find("takes no value"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateOptions({"max_read"}, false); }).find("needs a value"),
            std::string::npos);
}

TEST(MountHelper, SloppyModeWarnsInsteadOfFailing) {
  TranslatedOptions t = TranslateOptions({"bogus,source=/a"}, true);
  EXPECT_EQ(t.cli_args, (Args{"--source", "/a"}));
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("'bogus'"), std::string::npos);
}

TEST(MountHelper, HelperCallWithAFolderSource) {
  std::string dir = std::filesystem::temp_directory_path();
  HelperCall call = TranslateHelperCall({dir, "/mnt/m", "-n", "-o", "rw,no_hf_cache,allow_other"});
  EXPECT_EQ(call.mount_argv, (Args{"mount", "/mnt/m", "--source", dir, "--no-hf-cache", "-o",
                                   "allow_other,fsname=" + dir}));
  EXPECT_FALSE(call.fake);
  EXPECT_FALSE(call.verbose);
}

TEST(MountHelper, HelperCallWithTheWordAprfs) {
  HelperCall call = TranslateHelperCall({"aprfs", "/mnt/m", "-sfv", "-t", "fuse.aprfs",
                                         "-orepo=org/m,fsname=mine"});
  EXPECT_EQ(call.mount_argv, (Args{"mount", "/mnt/m", "--repo", "org/m", "-o", "fsname=mine"}));
  EXPECT_TRUE(call.fake);
  EXPECT_TRUE(call.verbose);
}

TEST(MountHelper, HelperCallErrors) {
  EXPECT_NE(ErrorOf([] { TranslateHelperCall({"/no/such/folder", "/mnt"}); })
                .find("SOURCE '/no/such/folder' is not a folder"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateHelperCall({"aprfs"}); }).find("expected SOURCE MOUNTPOINT"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateHelperCall({"aprfs", "/m", "-t", "fuse.sshfs"}); })
                .find("fuse.aprfs only"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateHelperCall({"aprfs", "/m", "-N", "1234"}); })
                .find("not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateHelperCall({"aprfs", "/m", "-x"}); }).find("'-x'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { TranslateHelperCall({"aprfs", "/m", "-o"}); }).find("-o needs"),
            std::string::npos);
}

TEST(MountHelper, RecognizesItsName) {
  EXPECT_TRUE(InvokedAsMountHelper("/sbin/mount.fuse.aprfs"));
  EXPECT_TRUE(InvokedAsMountHelper("mount.fuse.aprfs"));
  EXPECT_FALSE(InvokedAsMountHelper("/usr/bin/aprfs"));
  EXPECT_FALSE(InvokedAsMountHelper("mount.fuse.aprfsx"));
}

TEST(MountHelper, AprfsMountDashOIsRewrittenToo) {
  std::vector<std::string> in = {"aprfs", "mount", "/m", "-o", "source=/a,allow_other",
                                 "-f", "-ono_hf_cache,_netdev"};
  std::vector<char*> argv;
  for (std::string& a : in) argv.push_back(a.data());
  CommandLine line = RewriteCommandLine(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(line.exit_code, -1);
  EXPECT_EQ(line.argv, (Args{"aprfs", "mount", "/m", "-f", "--source", "/a", "--no-hf-cache",
                             "-o", "allow_other"}));
}

TEST(FuseConf, UserAllowOtherMustBeALineOfItsOwn) {
  std::string path = std::filesystem::temp_directory_path() / ("fuse.conf." + std::to_string(getpid()));
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write("# user_allow_other\n#user_allow_other\nmount_max = 1000\n");
  EXPECT_FALSE(FuseConfAllowsOther(path));
  write("mount_max = 1000\n  user_allow_other  \n");
  EXPECT_TRUE(FuseConfAllowsOther(path));
  std::filesystem::remove(path);
  EXPECT_FALSE(FuseConfAllowsOther(path));
}

}  // namespace
}  // namespace aprfs
