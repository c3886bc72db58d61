// aprfs mounted by mount(8): `mount -t fuse.aprfs SOURCE MOUNTPOINT -o ...` and fstab entries
// (`mount -T FSTAB`), through /sbin/mount.fuse.aprfs pointing at the build's binary.
#include <sys/stat.h>

#include <fstream>

#include "tests/service/service_util.h"

namespace aprfs_stest {
namespace {

// What a mount(8)-made mount must look like, then `umount` (mount(8)'s) ends it and its daemon.
void ExpectUmountEndsIt(const std::string& mountpoint) {
  ProcResult r = RunCommand({"umount", mountpoint}, 30s);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_FALSE(FindMount(mountpoint).has_value()) << "still mounted after umount";
  EXPECT_TRUE(WaitNoDaemons(mountpoint, 10s)) << "the daemon did not exit after umount";
}

TEST_F(ServiceTest, MountTypeFuseAprfsWithAFolderAsSource) {
  HelperSymlink helper;
  ExpectedTensors expected = WriteSmallModel(models_dir(), "alpha", 11);
  AdoptMount(mountpoint());
  // rw is what mount(8) adds by default; _netdev and nofail are fstab's: all three ignored.
  ProcResult r = RunCommand({"mount", "-t", "fuse.aprfs", models_dir(), mountpoint(), "-o",
                             "rw,no_hf_cache,allow_other,_netdev,nofail"},
                            60s);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::optional<MountDetails> details = ReadMountDetails(mountpoint());
  ASSERT_TRUE(details.has_value()) << "mount(8) returned 0 but nothing is mounted";
  EXPECT_EQ(details->fstype, "fuse.aprfs");
  EXPECT_EQ(details->source, models_dir()) << "mountinfo should name the fstab SOURCE";
  EXPECT_EQ(details->options.rfind("ro", 0), 0u) << "not read-only: " << details->options;
  EXPECT_NE(details->super_options.find("allow_other"), std::string::npos)
      << details->super_options;
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"alpha.apr", "alpha.q4k.apr"}))
      << "the default views";
  ExpectModelReads(MP("alpha.apr"), expected);
  EXPECT_EQ(FindDaemons(mountpoint()).size(), 1u);
  ExpectUmountEndsIt(mountpoint());
}

TEST_F(ServiceTest, MountTypeFuseAprfsWithEverythingInTheOptions) {
  HelperSymlink helper;
  ExpectedTensors first = WriteSmallModel(root() + "/one", "first", 12);
  ExpectedTensors second = WriteSmallModel(root() + "/two", "second", 13);
  AdoptMount(mountpoint());
  ProcResult r = RunCommand(
      {"mount", "-t", "fuse.aprfs", "aprfs", mountpoint(), "-o",
       "source=" + root() + "/one,source=" + root() + "/two,no_hf_cache,ro,noatime,"
       "comment=models,x-systemd.idle-timeout=60,views=apr+f16,no_view_cache,log_level=debug,"
       "log_file=" + root() + "/m.log"},
      60s);
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << SlurpOrEmpty(root() + "/m.log");
  std::optional<MountDetails> details = ReadMountDetails(mountpoint());
  ASSERT_TRUE(details.has_value());
  EXPECT_EQ(details->source, "aprfs");
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"first.apr", "first.f16.apr", "second.apr",
                                                               "second.f16.apr"}));
  ExpectModelReads(MP("first.apr"), first);
  ExpectModelReads(MP("second.apr"), second);
  // log_level and log_file reached the daemon.
  EXPECT_NE(SlurpOrEmpty(root() + "/m.log").find("debug"), std::string::npos)
      << "no debug line in the log_file=";
  ExpectUmountEndsIt(mountpoint());
}

// The fstab way, with mount(8)'s alternative fstab (-T). `mount -a` then finds the entry mounted
// (mountinfo names the same source) and leaves it alone.
TEST_F(ServiceTest, FstabEntryMountsAndMountAllSeesItMounted) {
  HelperSymlink helper;
  ExpectedTensors expected = WriteSmallModel(models_dir(), "tab", 14);
  const std::string fstab = root() + "/fstab";
  std::ofstream(fstab) << "# test fstab\n"
                       << "aprfs " << mountpoint()
                       << " fuse.aprfs ro,allow_other,_netdev,nofail,x-systemd.automount,"
                          "x-systemd.idle-timeout=60,source="
                       << models_dir() << ",no_hf_cache 0 0\n";
  AdoptMount(mountpoint());
  ProcResult r = RunCommand({"mount", "-T", fstab, mountpoint()}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_TRUE(IsAprfsMounted(mountpoint()));
  ExpectModelReads(MP("tab.apr"), expected);

  ProcResult all = RunCommand({"mount", "-a", "-T", fstab}, 60s);
  EXPECT_EQ(all.exit_code, 0) << all.Describe();
  EXPECT_EQ(CountMounts(mountpoint()), 1) << "mount -a mounted the entry a second time";
  EXPECT_EQ(FindDaemons(mountpoint()).size(), 1u);

  // Naming the mountpoint again: refused, the live mount untouched.
  ProcResult again = RunCommand({"mount", "-T", fstab, mountpoint()}, 60s);
  EXPECT_NE(again.exit_code, 0) << again.Describe();
  EXPECT_NE(again.err.find("already mounted"), std::string::npos) << again.Describe();
  EXPECT_EQ(CountMounts(mountpoint()), 1);
  ExpectModelReads(MP("tab.apr"), expected);
  ExpectUmountEndsIt(mountpoint());
}

TEST_F(ServiceTest, UnknownMountOptionIsAnErrorNamingIt) {
  HelperSymlink helper;
  WriteSmallModel(models_dir(), "x", 15);
  AdoptMount(mountpoint());
  ProcResult r = RunCommand({"mount", "-t", "fuse.aprfs", models_dir(), mountpoint(), "-o",
                             "no_hf_cache,cache_sise=10G"},
                            60s);
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.err.find("unknown mount option 'cache_sise=10G'"), std::string::npos)
      << r.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
  EXPECT_TRUE(FindDaemons(mountpoint()).empty());

  ProcResult bad_source =
      RunCommand({"mount", "-t", "fuse.aprfs", root() + "/missing", mountpoint()}, 60s);
  EXPECT_NE(bad_source.exit_code, 0);
  EXPECT_NE(bad_source.err.find("is not a folder"), std::string::npos) << bad_source.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
}

// The same -o spelling works on aprfs's own command line.
TEST_F(ServiceTest, AprfsMountTakesTheOptionsAsDashOToo) {
  ExpectedTensors expected = WriteSmallModel(models_dir(), "dash", 16);
  AdoptMount(mountpoint());
  ProcResult r = RunAprfs({"mount", mountpoint(), "-o",
                           "source=" + models_dir() + ",no_hf_cache,_netdev,allow_other,views=apr"},
                          60s);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(ListDir(mountpoint()), std::vector<std::string>{"dash.apr"});
  ExpectModelReads(MP("dash.apr"), expected);
  ProcResult umount = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
  EXPECT_TRUE(WaitNoDaemons(mountpoint(), 10s));
}

}  // namespace
}  // namespace aprfs_stest
