// What `cmake --install` ships: the binary, the mount(8) helper symlink, the systemd units (each
// passing `systemd-analyze verify`) and a man page covering every subcommand and option.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "tests/service/service_util.h"

namespace aprfs_stest {
namespace {
namespace fs = std::filesystem;

const std::string kPrefix = APRFS_INSTALL_PREFIX;

class InstallTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    dest_ = root() + "/dest";
    ProcResult r = RunCommand({"env", "DESTDIR=" + dest_, "cmake", "--install", BuildDir()}, 120s);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }
  // An installed path (prefix-relative or absolute) inside DESTDIR.
  std::string Installed(const std::string& path) const {
    return dest_ + (path.front() == '/' ? path : kPrefix + "/" + path);
  }
  std::string dest_;
};

// systemd-analyze verify needs the unit's ExecStart binary to exist: the copy made for it names
// the binary inside DESTDIR, the only change to the shipped file.
ProcResult Verify(const std::vector<std::string>& units, const std::string& man_path, bool user,
                  const std::string& runtime_dir) {
  std::vector<std::string> argv = {"env", "MANPATH=" + man_path, "XDG_RUNTIME_DIR=" + runtime_dir,
                                   "systemd-analyze", "verify"};
  if (user) argv.push_back("--user");
  argv.insert(argv.end(), units.begin(), units.end());
  return RunCommand(argv, 60s);
}

std::string CopyForVerify(const std::string& unit, const std::string& dir, const std::string& name,
                          const std::string& from, const std::string& to) {
  std::string text = SlurpOrEmpty(unit);
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  fs::create_directories(dir);
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

TEST_F(InstallTest, InstallPutsTheBinaryHelperUnitsAndManPageInPlace) {
  struct stat st;
  const std::string binary = Installed("bin/aprfs");
  ASSERT_EQ(stat(binary.c_str(), &st), 0) << binary;
  EXPECT_TRUE(st.st_mode & S_IXUSR);
  const std::string helper = Installed(std::string(APRFS_MOUNT_HELPER_DIR) + "/mount.fuse.aprfs");
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink(helper, ec).string(), kPrefix + "/bin/aprfs")
      << helper << ": " << ec.message();
  const std::string system_unit = SlurpOrEmpty(Installed("lib/systemd/system/aprfs@.service"));
  EXPECT_NE(system_unit.find("\nExecStart=" + kPrefix +
                             "/bin/aprfs mount -f %f --config /etc/aprfs/%i.json\n"),
            std::string::npos)
      << system_unit;
  EXPECT_NE(system_unit.find("\nType=notify\n"), std::string::npos);
  const std::string user_unit = SlurpOrEmpty(Installed("lib/systemd/user/aprfs@.service"));
  EXPECT_NE(user_unit.find("\nExecStart=" + kPrefix + "/bin/aprfs mount -f %h/%I"),
            std::string::npos)
      << user_unit;
  EXPECT_TRUE(fs::exists(Installed("share/man/man1/aprfs.1")));
  for (const char* example : {"srv-models.mount", "srv-models.automount", "srv-models.json"}) {
    EXPECT_TRUE(fs::exists(Installed(std::string("share/doc/aprfs/examples/") + example))) << example;
  }
}

TEST_F(InstallTest, EveryUnitPassesSystemdAnalyzeVerify) {
  const std::string man_path = Installed("share/man");
  const std::string runtime = root() + "/runtime";
  fs::create_directories(runtime);
  chmod(runtime.c_str(), 0700);
  const std::string from = kPrefix + "/bin/aprfs", to = Installed("bin/aprfs");

  const std::string system_dir = root() + "/verify-system";
  CopyForVerify(Installed("lib/systemd/system/aprfs@.service"), system_dir, "aprfs@.service", from, to);
  fs::create_symlink("aprfs@.service", system_dir + "/aprfs@srv-models.service");
  const std::string examples = Installed("share/doc/aprfs/examples");
  std::vector<std::string> system_units = {
      system_dir + "/aprfs@srv-models.service",
      CopyForVerify(examples + "/srv-models.mount", system_dir, "srv-models.mount", from, to),
      CopyForVerify(examples + "/srv-models.automount", system_dir, "srv-models.automount", from, to)};
  ProcResult system = Verify(system_units, man_path, false, runtime);
  EXPECT_EQ(system.exit_code, 0) << system.Describe();
  EXPECT_EQ(system.err, "") << system.Describe();

  const std::string user_dir = root() + "/verify-user";
  CopyForVerify(Installed("lib/systemd/user/aprfs@.service"), user_dir, "aprfs@.service", from, to);
  fs::create_symlink("aprfs@.service", user_dir + "/aprfs@models.service");
  ProcResult user = Verify({user_dir + "/aprfs@models.service"}, man_path, true, runtime);
  EXPECT_EQ(user.exit_code, 0) << user.Describe();
  EXPECT_EQ(user.err, "") << user.Describe();

  // The check is real: a unit whose binary is missing fails it.
  CopyForVerify(Installed("lib/systemd/system/aprfs@.service"), root() + "/verify-bad",
                "aprfs@.service", from, "/nonexistent/aprfs");
  fs::create_symlink("aprfs@.service", root() + "/verify-bad/aprfs@srv-models.service");
  ProcResult bad = Verify({root() + "/verify-bad/aprfs@srv-models.service"}, man_path, false, runtime);
  EXPECT_NE(bad.exit_code, 0) << bad.Describe();
}

// Options and subcommands as `--help` lists them: "--source", "-f", "mount"...
std::set<std::string> HelpOptions(const std::string& help) {
  std::set<std::string> options;
  std::regex option(R"((^|[\s,])(--?[a-zA-Z][a-zA-Z-]*))");
  for (auto it = std::sregex_iterator(help.begin(), help.end(), option); it != std::sregex_iterator(); ++it) {
    options.insert((*it)[2]);
  }
  return options;
}

std::set<std::string> HelpSubcommands(const std::string& help) {
  std::set<std::string> names;
  size_t section = help.find("SUBCOMMANDS:");
  if (section == std::string::npos) section = help.find("Subcommands:");
  if (section == std::string::npos) return names;
  std::istringstream lines(help.substr(section));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string word;
    if (line.empty() || !std::isspace(static_cast<unsigned char>(line[0]))) break;
    if (words >> word) names.insert(word);
  }
  return names;
}

TEST(ManPage, FormatsWithoutWarningsAndCoversEverySubcommandAndOption) {
  const std::string page = SourceDir() + "/man/aprfs.1";
  ProcResult groff = RunCommand({"groff", "-man", "-Tutf8", "-ww", "-z", page}, 60s);
  EXPECT_EQ(groff.exit_code, 0) << groff.Describe();
  EXPECT_EQ(groff.err, "") << groff.Describe();
  std::string text = SlurpOrEmpty(page);
  for (size_t at = text.find("\\-"); at != std::string::npos; at = text.find("\\-", at)) {
    text.replace(at, 2, "-");
  }
  ProcResult top = RunAprfs({"--help"}, 30s);
  ASSERT_EQ(top.exit_code, 0) << top.Describe();
  std::set<std::string> subcommands = HelpSubcommands(top.out);
  ASSERT_TRUE(subcommands.count("mount")) << "cannot find the subcommands in:\n" << top.out;
  for (const std::string& sub : subcommands) {
    std::regex entry(R"((^|\n)\.(B|BI|TP) "?)" + sub + R"(\b)");
    EXPECT_TRUE(std::regex_search(text, entry)) << "man page lacks subcommand " << sub;
    ProcResult help = RunAprfs({sub, "--help"}, 30s);
    EXPECT_EQ(help.exit_code, 0) << help.Describe();
    for (const std::string& option : HelpOptions(help.out)) {
      if (option == "-h" || option == "--help") continue;
      EXPECT_NE(text.find(option), std::string::npos)
          << "man page lacks option " << option << " of `aprfs " << sub << "`";
    }
  }
  // The -o spellings, in the man page and in `aprfs mount --help`.
  ProcResult mount_help = RunAprfs({"mount", "--help"}, 30s);
  for (const char* name : {"source=", "repo=", "hf_cache=", "no_hf_cache", "config=", "cache_dir=",
                           "cache_size=", "max_connections=", "log_level=", "log_file=", "_netdev",
                           "nofail", "x-systemd", "allow_other", "user_allow_other"}) {
    EXPECT_NE(text.find(name), std::string::npos) << "man page lacks -o " << name;
  }
  EXPECT_NE(mount_help.out.find("source=DIR"), std::string::npos) << mount_help.out;
  EXPECT_NE(mount_help.out.find("_netdev"), std::string::npos) << mount_help.out;
}

}  // namespace
}  // namespace aprfs_stest
