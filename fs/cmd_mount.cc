#include <fcntl.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "fs/commands.h"
#include "fs/fuse_adapter.h"
#include "fs/mountinfo.h"
#include "fs/namespace.h"

extern char** environ;

namespace aprfs {
namespace {

struct MountArgs {
  std::string mountpoint;
  SourceOptions sources;
  bool foreground = false;
  std::vector<std::string> options;
  std::string log_level = "info";
  std::string log_file;
};

// Each open shard holds a descriptor for the life of its plan.
void RaiseFileLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// -o values may hold several comma-separated options; root mounts are shared with every user
// unless the caller chose otherwise.
std::vector<std::string> FuseOptions(const MountArgs& args) {
  std::vector<std::string> options = args.options;
  bool chose_sharing = false;
  for (const std::string& option : options) {
    if (option.find("allow_other") != std::string::npos ||
        option.find("allow_root") != std::string::npos) {
      chose_sharing = true;
    }
  }
  if (geteuid() == 0 && !chose_sharing) options.push_back("allow_other");
  return options;
}

// Runs the daemon in this process; `report` says once whether the mount came up.
int Serve(const MountArgs& args, const CatalogOptions& catalog_options,
          const std::function<void(bool, const std::string&)>& report) {
  RaiseFileLimit();
  Catalog catalog(catalog_options);
  catalog.Scan(true);  // discovery only: plans are built on first lookup
  Namespace ns(catalog);
  FuseMountOptions fuse;
  fuse.mountpoint = args.mountpoint;
  fuse.fuse_options = FuseOptions(args);
  return ServeFuse(ns, fuse, [&](bool ok, const std::string& message) {
    report(ok, message);
    if (ok) {
      spdlog::info("serving {} (HF cache: {}, {} source folder(s), {} Hub repo(s))",
                   args.mountpoint, catalog_options.hf_cache.value_or("off"),
                   catalog_options.sources.size(), catalog_options.repos.size());
    }
  });
}

// Forks; the parent returns once the child's mount is up (0) or failed (1, message printed),
// so `aprfs mount` behaves like mount(8) and scripts can use the mount right after it.
int ServeInBackground(const MountArgs& args, const CatalogOptions& catalog_options) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    std::perror("aprfs mount: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("aprfs mount: fork");
    return 1;
  }
  if (pid > 0) {
    close(pipe_fds[1]);
    std::string message;
    char buffer[512];
    ssize_t n;
    while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) message.append(buffer, n);
    close(pipe_fds[0]);
    // The kernel finishes the FUSE handshake with the daemon only on the first request, and
    // the daemon can still fail it (bad -o values): a stat() is that first request.
    struct stat st;
    if (message == "ok" && stat(args.mountpoint.c_str(), &st) == 0) return 0;
    if (message == "ok") {
      message = "the daemon failed the FUSE handshake (" + std::string(std::strerror(errno)) +
                ")" + (args.log_file.empty() ? "; run with -f to see why" : "; see " + args.log_file);
      umount2(args.mountpoint.c_str(), MNT_DETACH);
    }
    if (message.empty()) message = "the daemon exited before the mount was ready";
    std::cerr << "aprfs mount: " << message << "\n";
    return 1;
  }
  close(pipe_fds[0]);
  setsid();
  SetUpLogging(args.log_level, args.log_file);
  int report_fd = pipe_fds[1];
  auto report = [&](bool ok, const std::string& message) {
    std::string text = ok ? "ok" : message;
    if (write(report_fd, text.data(), text.size()) < 0) {
      // The parent is gone; nothing left to tell.
    }
    close(report_fd);
    report_fd = -1;
    if (!ok) return;
    // Detach from the caller's terminal or pipes: stderr (libfuse writes there too) goes to
    // the log file, or nowhere.
    int null_fd = open("/dev/null", O_RDWR);
    int err_fd = args.log_file.empty()
                     ? null_fd
                     : open(args.log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(err_fd >= 0 ? err_fd : null_fd, STDERR_FILENO);
    if (err_fd > STDERR_FILENO && err_fd != null_fd) close(err_fd);
    if (null_fd > STDERR_FILENO) close(null_fd);
    if (chdir("/") != 0) spdlog::warn("chdir /: {}", std::strerror(errno));
  };
  _exit(Serve(args, catalog_options, report));
}

int RunMount(MountArgs args) {
  std::error_code ec;
  args.mountpoint = std::filesystem::absolute(args.mountpoint, ec).string();
  if (!args.log_file.empty()) args.log_file = std::filesystem::absolute(args.log_file, ec).string();
  struct stat st;
  if (stat(args.mountpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::cerr << "aprfs mount: " << args.mountpoint << ": not an existing folder\n";
    return 1;
  }
  // Options are checked before the fork, so their errors reach the caller's terminal.
  CatalogOptions catalog_options;
  try {
    catalog_options = args.sources.ToCatalogOptions();
  } catch (const std::exception& e) {
    std::cerr << "aprfs mount: " << e.what() << "\n";
    return 1;
  }
  if (!args.foreground) return ServeInBackground(args, catalog_options);
  SetUpLogging(args.log_level, args.log_file);
  return Serve(args, catalog_options, [](bool ok, const std::string& message) {
    if (!ok) spdlog::error("mount failed: {}", message);
  });
}

int RunProgram(std::vector<std::string> argv) {
  std::vector<char*> raw;
  for (std::string& arg : argv) raw.push_back(arg.data());
  raw.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, raw[0], nullptr, nullptr, raw.data(), environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int RunUmount(const std::string& mountpoint) {
  std::error_code ec;
  std::string path = std::filesystem::weakly_canonical(std::filesystem::absolute(mountpoint, ec), ec)
                         .string();
  std::optional<MountEntry> mount = FindMount(path);
  if (!mount) {
    std::cerr << "aprfs umount: " << path << ": nothing is mounted there\n";
    return 1;
  }
  if (mount->type != "fuse.aprfs") {
    std::cerr << "aprfs umount: " << path << ": not an aprfs mount (it is " << mount->type
              << ")\n";
    return 1;
  }
  if (geteuid() == 0) {
    if (umount2(path.c_str(), 0) == 0) return 0;
    int err = errno;
    std::cerr << "aprfs umount: cannot unmount " << path << ": "
              << (err == EBUSY ? "it is busy (a process still has a file open)"
                               : std::strerror(err))
              << "\n";
    return 1;
  }
  // Users unmount their FUSE mounts through the setuid helper, which prints its own error.
  return RunProgram({"fusermount3", "-u", path}) == 0 ? 0 : 1;
}

}  // namespace

void RegisterMount(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MountArgs>();
  CLI::App* cmd = app.add_subcommand("mount", "Mount the models as virtual .apr files");
  cmd->add_option("MOUNTPOINT", args->mountpoint, "An existing, empty folder")->required();
  args->sources.AddTo(*cmd);
  cmd->add_flag("-f,--foreground", args->foreground, "Stay in the foreground (logs to stderr)");
  cmd->add_option("-o", args->options, "FUSE mount options, comma-separated (allow_other...)")
      ->allow_extra_args(false);
  cmd->add_option("--log-level", args->log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  cmd->add_option("--log-file", args->log_file, "Write logs to FILE (default: stderr)");
  cmd->callback([args, &exit_code] { exit_code = RunMount(*args); });
}

void RegisterUmount(CLI::App& app, int& exit_code) {
  auto mountpoint = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("umount", "Unmount an aprfs mount");
  cmd->add_option("MOUNTPOINT", *mountpoint, "Where aprfs is mounted")->required();
  cmd->callback([mountpoint, &exit_code] { exit_code = RunUmount(*mountpoint); });
}

}  // namespace aprfs
