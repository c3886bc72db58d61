// The CLI around the mount (test 7): background mode, umount, errors; inspect on copies.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/integration/mount_fixture.h"

extern char** environ;

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

bool WaitUntilGone(pid_t pid, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ProcessAlive(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST_F(MountTest, BackgroundMountIsUsableWhenItReturnsAndUmountUnmounts) {
  tw::TestModel model = tw::LlamaLikeModel(2, 2, true, 101);
  tw::WriteModel(Model("bg"), model);
  AdoptMount(mountpoint());  // TearDown cleans up whatever happens below

  ProcResult mount = RunAprfs({"mount", mountpoint(), "--no-hf-cache", "--source", models_dir(),
                               "--log-file", root() + "/bg.log"},
                              30s);
  ASSERT_EQ(mount.exit_code, 0) << mount.Describe() << "\n" << SlurpOrEmpty(root() + "/bg.log");
  // Usable the moment `aprfs mount` returned: the very first stat sees the model.
  struct stat st;
  ASSERT_EQ(stat(MP("bg.apr").c_str(), &st), 0)
      << "first stat after `aprfs mount` returned: " << std::strerror(errno);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_GT(st.st_size, 0);
  EXPECT_TRUE(IsAprfsMounted(mountpoint()));
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"bg.apr", "bg.q4k.apr"}));
  std::vector<pid_t> daemons = FindDaemonPids(mountpoint());
  ASSERT_EQ(daemons.size(), 1u) << "want exactly one background daemon for " << mountpoint();
  const pid_t daemon = daemons[0];

  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(MP("bg.apr"), &bytes, &error)) << error;
  AprLayout layout = ParseAprBytes(bytes);
  ExpectLayoutMatches(layout, ExpectedOf(model));
  ExpectTensorBytes(layout, ExpectedOf(model), bytes, "read()");

  ProcResult umount = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value()) << "still mounted after aprfs umount";
  EXPECT_TRUE(WaitUntilGone(daemon, 10s)) << "background daemon did not exit after umount";
  EXPECT_EQ(ListDir(mountpoint()), std::vector<std::string>{});

  ProcResult again = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_NE(again.exit_code, 0) << "second umount of an unmounted folder: " << again.Describe();
  EXPECT_FALSE(again.err.empty()) << "second umount failed without saying why";
}

// Options may come before the mountpoint, as with mount(8): `--source DIR MOUNTPOINT` must not
// read the mountpoint as a second source folder.
TEST_F(MountTest, RepeatedSourceOptionsBeforeTheMountpointTakeOneFolderEach) {
  tw::WriteModel(root() + "/first/alpha", tw::LlamaLikeModel(1, 1, true, 7));
  tw::WriteModel(root() + "/second/beta", tw::LlamaLikeModel(1, 2, true, 8));
  AdoptMount(mountpoint());
  ProcResult mount =
      RunAprfs({"mount", "--source", root() + "/first", mountpoint(), "--no-hf-cache", "-o", "ro",
                "--source", root() + "/second"},
               30s);
  ASSERT_EQ(mount.exit_code, 0) << mount.Describe();
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"alpha.apr", "alpha.q4k.apr", "beta.apr", "beta.q4k.apr"}));
  EXPECT_EQ(RunAprfs({"umount", mountpoint()}, 30s).exit_code, 0);
}

TEST_F(MountTest, MountOnMissingFolderOrFileFailsWithClearMessage) {
  tw::WriteModel(Model("m"), tw::LlamaLikeModel(1, 1));
  const std::string missing = root() + "/does-not-exist";
  for (bool foreground : {false, true}) {
    SCOPED_TRACE(foreground ? "foreground" : "background");
    std::vector<std::string> args = {"mount", missing, "--no-hf-cache", "--source", models_dir()};
    if (foreground) args.push_back("-f");
    AdoptMount(missing);
    ProcResult r = RunAprfs(args, 30s);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.err.find("does-not-exist"), std::string::npos)
        << "the message does not name the folder: " << r.Describe();
    EXPECT_FALSE(FindMount(missing).has_value());
    EXPECT_FALSE(fs::exists(missing)) << "aprfs created the missing mountpoint";
  }
  const std::string file = root() + "/a-file";
  tw::WriteFile(file, "not a folder");
  AdoptMount(file);
  ProcResult r = RunAprfs({"mount", file, "--no-hf-cache", "--source", models_dir()}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("a-file"), std::string::npos) << r.Describe();
  EXPECT_FALSE(FindMount(file).has_value());
}

TEST_F(MountTest, UmountOfSomethingNotMountedFails) {
  ProcResult r = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_FALSE(r.err.empty());
  ProcResult missing = RunAprfs({"umount", root() + "/nowhere"}, 30s);
  EXPECT_NE(missing.exit_code, 0) << missing.Describe();
}

TEST_F(MountTest, UmountWhileAFileIsOpenFailsAsBusyAndTheMountKeepsWorking) {
  tw::TestModel model = tw::LlamaLikeModel(2, 2, true, 102);
  tw::WriteModel(Model("busy"), model);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  {
    Fd open_file(MP("busy.apr"), O_RDONLY);
    ASSERT_TRUE(open_file.ok());
    ProcResult r = RunAprfs({"umount", mountpoint()}, 30s);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("busy"), std::string::npos) << r.Describe();
    EXPECT_TRUE(IsAprfsMounted(mountpoint()));
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP("busy.apr"), &bytes, &error)) << error;
    ExpectTensorBytes(ParseAprBytes(bytes), ExpectedOf(model), bytes, "read()");
  }
  ProcResult r = RunAprfs({"umount", mountpoint()}, 30s);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
  std::optional<int> status = WaitDaemonExit(10s);
  ASSERT_TRUE(status.has_value()) << "foreground daemon did not exit after umount";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "daemon wait status " << *status;
}

TEST_F(MountTest, ForegroundDaemonUnmountsOnSigterm) {
  tw::WriteModel(Model("term"), tw::LlamaLikeModel(1, 1));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ASSERT_TRUE(fs::exists(MP("term.apr")));
  ASSERT_EQ(kill(daemon_pid(), SIGTERM), 0);
  std::optional<int> status = WaitDaemonExit(10s);
  ASSERT_TRUE(status.has_value()) << "daemon ignored SIGTERM for 10 s";
  EXPECT_TRUE(WIFEXITED(*status)) << "daemon died of a signal: status " << *status;
  EXPECT_FALSE(FindMount(mountpoint()).has_value()) << "SIGTERM left the mount behind";
}

// `out=$(aprfs mount ...)` and subprocess.run(capture_output=True) wait for EOF on the output
// pipes; a background mount must not keep them open once it has returned.
void ExpectBackgroundMountReleasesOutput(const std::string& mountpoint,
                                         const std::vector<std::string>& extra) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  std::vector<std::string> argv = {AprfsBinary(), "mount", mountpoint};
  argv.insert(argv.end(), extra.begin(), extra.end());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  ASSERT_EQ(rc, 0);
  // The foreground part returns quickly.
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      close(pipe_fds[0]);
      FAIL() << "aprfs mount did not return within 30 s";
    }
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // Then the pipe must reach end of file: nobody else holds its write end.
  std::string output;
  bool eof = false;
  auto eof_deadline = std::chrono::steady_clock::now() + 30s;
  while (!eof && std::chrono::steady_clock::now() < eof_deadline) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buffer[4096];
      ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
      if (n <= 0) {
        eof = true;
      } else {
        output.append(buffer, n);
      }
    }
  }
  close(pipe_fds[0]);
  EXPECT_TRUE(eof) << "30 s after `aprfs mount` returned 0, its stdout/stderr pipe is still "
                      "open (held by the daemon): `out=$(aprfs mount ... 2>&1)` would hang "
                      "until the unmount. Output so far: "
                   << output;
  ASSERT_TRUE(IsAprfsMounted(mountpoint));
  ProcResult umount = RunAprfs({"umount", mountpoint}, 30s);
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
}

TEST_F(MountTest, BackgroundMountReleasesCallersOutputPipes) {
  tw::WriteModel(Model("p"), tw::LlamaLikeModel(1, 1));
  AdoptMount(mountpoint());
  ExpectBackgroundMountReleasesOutput(mountpoint(), {"--no-hf-cache", "--source", models_dir()});
}

TEST_F(MountTest, BackgroundMountWithLogFileReleasesCallersOutputPipes) {
  tw::WriteModel(Model("p"), tw::LlamaLikeModel(1, 1));
  AdoptMount(mountpoint());
  ExpectBackgroundMountReleasesOutput(
      mountpoint(), {"--no-hf-cache", "--source", models_dir(), "--log-file", root() + "/bg.log"});
}

// `-o` options reach FUSE (fstab/mount(8) style). Whatever libfuse makes of an option, `aprfs
// mount` must not report success for a mount that is not usable.
TEST_F(MountTest, BackgroundMountWithMaxReadOptionIsUsableOrFails) {
  tw::WriteModel(Model("opt"), tw::LlamaLikeModel(1, 1));
  AdoptMount(mountpoint());
  ProcResult r = RunAprfs({"mount", mountpoint(), "--no-hf-cache", "--source", models_dir(), "-o",
                           "max_read=65536", "--log-file", root() + "/opt.log"},
                          30s);
  if (r.exit_code == 0) {
    struct stat st;
    EXPECT_EQ(stat(MP("opt.apr").c_str(), &st), 0)
        << "`aprfs mount` returned 0 but the first stat fails: " << std::strerror(errno)
        << "; mounted: " << IsAprfsMounted(mountpoint()) << "\n"
        << SlurpOrEmpty(root() + "/opt.log") << r.Describe();
  } else {
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_FALSE(r.err.empty()) << r.Describe();
    EXPECT_FALSE(FindMount(mountpoint()).has_value());
  }
}

TEST_F(MountTest, CommaSeparatedFuseOptionsAreAccepted) {
  tw::TestModel model = tw::LlamaLikeModel(1, 2, true, 104);
  tw::WriteModel(Model("o"), model);
  ASSERT_NO_FATAL_FAILURE(
      Mount({"--no-hf-cache", "--source", models_dir(), "-o", "allow_other,noatime", "-o", "ro"}));
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(MP("o.apr"), &bytes, &error)) << error;
  ExpectTensorBytes(ParseAprBytes(bytes), ExpectedOf(model), bytes, "read()");
}

// `aprfs umount` is documented as "Unmount an aprfs mount"; as root it must not unmount some
// other filesystem.
TEST_F(MountTest, UmountRefusesAMountThatIsNotAprfs) {
  const std::string other = root() + "/tmpfs";
  fs::create_directories(other);
  AdoptMount(other);
  ASSERT_EQ(mount("none", other.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  ProcResult r = RunAprfs({"umount", other}, 30s);
  EXPECT_NE(r.exit_code, 0) << "aprfs umount unmounted a tmpfs: " << r.Describe();
  EXPECT_TRUE(FindMount(other).has_value()) << "the tmpfs was unmounted";
  umount2(other.c_str(), MNT_DETACH);
}

// `aprfs inspect` on a copy: valid copy passes with the footer checked; a flipped data byte
// fails the footer check, which --quick skips.
TEST_F(MountTest, InspectChecksTheFooterOfACopyUnlessQuick) {
  tw::TestModel model = tw::LlamaLikeModel(2, 2, true, 103);
  tw::WriteModel(Model("insp"), model);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ProcResult mounted = RunAprfs({"inspect", MP("insp.apr")}, 60s);
  EXPECT_EQ(mounted.exit_code, 0) << mounted.Describe();
  EXPECT_NE(mounted.out.find("footer: ok"), std::string::npos) << mounted.Describe();

  const std::string copy = work_dir() + "/insp.apr";
  ProcResult cp = RunCommand({"cp", MP("insp.apr"), copy}, 60s);
  ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
  AprLayout layout = ParseAprFile(copy);
  ASSERT_EQ(layout.error, "");
  const AprEntry* e = layout.Find("model.norm.weight");
  ASSERT_NE(e, nullptr);
  {
    Fd fd(copy, O_RDWR);
    ASSERT_TRUE(fd.ok());
    char byte;
    off_t at = static_cast<off_t>(layout.data_offset + e->offset + 1);
    ASSERT_EQ(pread(fd.get(), &byte, 1, at), 1);
    byte = static_cast<char>(byte ^ 0x5A);
    ASSERT_EQ(pwrite(fd.get(), &byte, 1, at), 1);
  }
  ProcResult full = RunAprfs({"inspect", copy}, 60s);
  EXPECT_EQ(full.exit_code, 1) << "a corrupted copy passed inspect: " << full.Describe();
  EXPECT_NE(full.out.find("MISMATCH"), std::string::npos) << full.Describe();
  ProcResult quick = RunAprfs({"inspect", copy, "--quick"}, 60s);
  EXPECT_EQ(quick.exit_code, 0) << quick.Describe();
  ProcResult check = RunAprcheck(copy, Model("insp"));
  EXPECT_EQ(check.exit_code, 1) << "aprcheck accepted a corrupted copy: " << check.Describe();
}

// The merged safetensors view passes inspect in the mount and as a copy; a truncated copy and a
// header that breaks the reader's rules are named.
TEST_F(MountTest, InspectReadsSafetensorsFilesAndNamesTheBrokenRule) {
  tw::TestModel model = tw::LlamaLikeModel(2, 2, true, 104);
  tw::WriteModel(Model("st"), model);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  ProcResult mounted = RunAprfs({"inspect", "--json", MP("st.safetensors")}, 60s);
  EXPECT_EQ(mounted.exit_code, 0) << mounted.Describe();
  nlohmann::json report = nlohmann::json::parse(mounted.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << mounted.Describe();
  EXPECT_EQ(report["format"], "safetensors");
  EXPECT_EQ(report["valid"], true);
  EXPECT_EQ(report["tensor_count"], model.TensorsByName().size());
  EXPECT_EQ(report["metadata"], nlohmann::json({{"format", "pt"}}));
  EXPECT_TRUE(report["warnings"].empty()) << report["warnings"];

  const std::string copy = work_dir() + "/st.safetensors";
  ProcResult cp = RunCommand({"cp", MP("st.safetensors"), copy}, 60s);
  ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
  ProcResult text = RunAprfs({"inspect", copy}, 60s);
  EXPECT_EQ(text.exit_code, 0) << text.Describe();
  EXPECT_NE(text.out.find("safetensors, "), std::string::npos) << text.Describe();
  EXPECT_NE(text.out.find("\nvalid\n"), std::string::npos) << text.Describe();

  ASSERT_EQ(truncate(copy.c_str(), static_cast<off_t>(FileSize(copy) - 1)), 0);
  ProcResult truncated = RunAprfs({"inspect", copy}, 60s);
  EXPECT_EQ(truncated.exit_code, 1) << truncated.Describe();
  EXPECT_NE(truncated.out.find("INVALID"), std::string::npos) << truncated.Describe();
  EXPECT_NE(truncated.out.find(copy), std::string::npos) << "names the file: " << truncated.Describe();

  // No "format" and an unpadded header: valid for the reader, with the loaders' caveats.
  tw::SafetensorsLayout bare;
  bare.pad_header_to_8 = false;
  bare.metadata.clear();
  const std::string odd = work_dir() + "/odd.safetensors";
  tw::WriteFile(odd, tw::SafetensorsBytes({tw::MakeTensor("w", "F16", {3})}, bare));
  ProcResult warned = RunAprfs({"inspect", "--json", odd}, 60s);
  EXPECT_EQ(warned.exit_code, 0) << warned.Describe();
  report = nlohmann::json::parse(warned.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << warned.Describe();
  EXPECT_EQ(report["warnings"].size(), 1u + (report["header_len"].get<uint64_t>() % 8 != 0))
      << report["warnings"];
}

}  // namespace
}  // namespace aprfs_itest
