#include <fcntl.h>
#include <malloc.h>
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
#include <thread>

#include "fs/cli/commands.h"
#include "fs/fuse_adapter.h"
#include "fs/mount/fuse_conf.h"
#include "fs/mount/mount_holders.h"
#include "fs/mount/mount_recovery.h"
#include "fs/mount/mountinfo.h"
#include "fs/namespace.h"
#include "fs/mount/service_notify.h"

namespace aprfs {
namespace {

struct MountArgs {
  std::string mountpoint;
  SourceOptions sources;
  bool foreground = false;
  std::vector<std::string> options;
  std::string log_level = "info";
  std::string log_file;
  bool replaced_dead_mount = false;  // logged once the daemon's log is set up
};

// Each open shard holds a descriptor for the life of its plan.
void RaiseFileLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// -o values may hold several comma-separated options.
bool HasOption(const MountArgs& args, const std::string& name) {
  for (const std::string& option : args.options) {
    if (option.find(name) != std::string::npos) return true;
  }
  return false;
}

// Root mounts are shared with every user unless the caller chose otherwise.
std::vector<std::string> FuseOptions(const MountArgs& args) {
  std::vector<std::string> options = args.options;
  bool chose_sharing = HasOption(args, "allow_other") || HasOption(args, "allow_root");
  if (geteuid() == 0 && !chose_sharing) options.push_back("allow_other");
  return options;
}

// The mountpoint as mountinfo spells it, found without touching the mountpoint itself (which
// may be a dead FUSE mount that fails every stat()).
std::string MountpointPath(const std::string& arg) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(arg, ec).lexically_normal();
  if (path.has_parent_path() && !path.has_filename()) path = path.parent_path();
  std::filesystem::path parent = std::filesystem::canonical(path.parent_path(), ec);
  return ec ? path.string() : (parent / path.filename()).string();
}

// Under systemd, stderr goes to the journal, which stamps every line itself.
bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  struct stat st;
  if (stream == nullptr || fstat(STDERR_FILENO, &st) != 0) return false;
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) == stream;
}

// stat() of the mountpoint from a forked child that holds no descriptor of this process: a
// daemon that stat()s its own mount and is then killed (kill -9) before answering would wait
// forever inside the kernel, holding the /dev/fuse descriptor that would end the wait. Returns
// 0 or the errno.
int StatFromChild(const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    close_range(0, ~0U, 0);  // async-signal-safe calls only, after fork in a threaded process
    struct stat st;
    _exit(stat(path.c_str(), &st) == 0 ? 0 : (errno & 0xff));
  }
  if (pid < 0) return errno;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

// Runs the daemon in this process; `report` says once whether the mount came up.
int Serve(const MountArgs& args, const CatalogOptions& catalog_options,
          const std::function<void(bool, const std::string&)>& report) {
  RaiseFileLimit();
  // Plan builds allocate buffers of megabytes (the prefix, the tensor list) and free them
  // again. glibc raises its mmap threshold after each such free, so the next ones come from
  // the heap and stay resident as holes; a fixed threshold hands them back to the kernel.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  if (args.replaced_dead_mount) {
    spdlog::warn("{}: replaced a dead aprfs mount (its daemon was gone: Transport endpoint is "
                 "not connected)", args.mountpoint);
  }
  Catalog catalog(catalog_options);
  catalog.Scan(true);  // discovery only: plans are built on first lookup
  Namespace ns(catalog);
  FuseMountOptions fuse;
  fuse.mountpoint = args.mountpoint;
  fuse.fuse_options = FuseOptions(args);
  std::thread readiness;
  int result = ServeFuse(ns, fuse, [&](bool ok, const std::string& message) {
    report(ok, message);
    if (!ok) return;
    std::string status = fmt::format("serving {} (HF cache: {}, {} source folder(s), {} Hub repo(s))",
                                     args.mountpoint, catalog_options.hf_cache.value_or("off"),
                                     catalog_options.sources.size(), catalog_options.repos.size());
    spdlog::info("{}", status);
    if (!args.foreground) return;
    // The FUSE loop starts after this callback returns; the mount is ready for the service
    // manager once it answers a stat(), the first request (and the end of the handshake).
    readiness = std::thread([mountpoint = args.mountpoint, status] {
      if (int err = StatFromChild(mountpoint); err == 0) {
        NotifyService("READY=1\nSTATUS=" + status);
      } else {
        std::string error = std::strerror(err);
        spdlog::error("the mount at {} does not answer: {}", mountpoint, error);
        NotifyService("STATUS=the mount does not answer: " + error);
      }
    });
  });
  if (args.foreground) NotifyService("STOPPING=1\nSTATUS=unmounted " + args.mountpoint);
  if (readiness.joinable()) readiness.join();
  return result;
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

// A dead aprfs mount (its daemon was killed) is replaced; a live one is an error. Returns false
// (message printed) when the mount must not go on.
bool ClearMountpoint(MountArgs& args) {
  const std::string& mountpoint = args.mountpoint;
  switch (ProbeExistingMount(mountpoint)) {
    case ExistingMount::kNone:
    case ExistingMount::kOther:
      return true;
    case ExistingMount::kLive:
      std::cerr << "aprfs mount: " << mountpoint << ": already mounted (a live aprfs mount is "
                << "there; `aprfs umount " << mountpoint << "` first)\n";
      return false;
    case ExistingMount::kHanging:
      std::cerr << "aprfs mount: " << mountpoint << ": an aprfs mount is there and does not "
                << "answer (is its daemon stopped?); `umount -l " << mountpoint
                << "` or kill the daemon first\n";
      return false;
    case ExistingMount::kDead:
      break;
  }
  std::string error = DetachDeadMount(mountpoint);
  if (!error.empty()) {
    std::cerr << "aprfs mount: " << mountpoint << ": a dead aprfs mount is there (Transport "
              << "endpoint is not connected) and cannot be detached: " << error << "\n";
    return false;
  }
  args.replaced_dead_mount = true;
  // The caller of a background mount sees only stderr; a foreground daemon logs it there.
  if (!args.foreground) {
    std::cerr << "aprfs mount: " << mountpoint << ": replaced a dead aprfs mount (its daemon was "
              << "gone: Transport endpoint is not connected)\n";
  }
  return true;
}

// s3:// sources are listed before the daemon starts, so that a missing bucket or wrong
// credentials fail the mount with the store's word for it. An unreachable store does not: the
// daemon serves the listing an earlier mount kept, or lists it once it answers.
// The listings go to the daemon, which then need not list again.
bool CheckS3Sources(CatalogOptions& options) {
  if (options.s3_sources.empty()) return true;
  S3Client client(*options.s3);
  for (const S3Uri& source : options.s3_sources) {
    try {
      options.s3_listed[source.ToString()] = ListS3Source(client, source, options.remote.cache_dir);
    } catch (const S3Error& e) {
      if (!e.transient()) {
        std::cerr << "aprfs mount: " << e.what() << "\n";
        return false;
      }
      std::cerr << "aprfs mount: warning: " << e.what() << "; its models appear once it answers\n";
    }
  }
  return true;
}

int RunMount(MountArgs args) {
  std::error_code ec;
  args.mountpoint = MountpointPath(args.mountpoint);
  if (!args.log_file.empty()) args.log_file = std::filesystem::absolute(args.log_file, ec).string();
  // fusermount3 would refuse it later, from the forked daemon; say it here, to the caller.
  if (geteuid() != 0 && (HasOption(args, "allow_other") || HasOption(args, "allow_root")) &&
      !FuseConfAllowsOther()) {
    std::cerr << "aprfs mount: allow_other needs user_allow_other in /etc/fuse.conf (only root "
              << "may share a FUSE mount with other users otherwise)\n";
    return 1;
  }
  if (!ClearMountpoint(args)) return 1;
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
  // A foreground daemon logs from here on (what listing S3 sources finds, too); a background
  // one's caller reads the warnings on its terminal.
  if (args.foreground) {
    SetUpLogging(args.log_level, args.log_file);
    if (args.log_file.empty() && StderrIsJournal()) spdlog::set_pattern("%l %v");
  }
  if (!CheckS3Sources(catalog_options)) return 1;
  if (!args.foreground) return ServeInBackground(args, catalog_options);
  return Serve(args, catalog_options, [](bool ok, const std::string& message) {
    if (!ok) {
      spdlog::error("mount failed: {}", message);
      NotifyService("STATUS=mount failed: " + message);
    }
  });
}

// Says which processes keep the mount busy (only those the caller may inspect).
void ExplainBusy(const std::string& path) {
  std::vector<MountHolder> holders = FindMountHolders(path);
  if (holders.empty()) {
    std::cerr << "aprfs umount: " << path << ": busy, but no process this user may inspect "
              << "holds a file, folder or mapping under it (try as root)\n";
  }
  for (const MountHolder& holder : holders) {
    std::cerr << "aprfs umount: " << path << ": busy: " << DescribeHolder(holder) << "\n";
  }
}

int RunUmount(const std::string& mountpoint) {
  std::string path = MountpointPath(mountpoint);
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
    if (err == EBUSY) {
      ExplainBusy(path);
    } else {
      std::cerr << "aprfs umount: cannot unmount " << path << ": " << std::strerror(err) << "\n";
    }
    return 1;
  }
  // Users unmount their FUSE mounts through the setuid helper, which prints its own error.
  if (RunProgram({"fusermount3", "-u", path}) == 0) return 0;
  if (FindMount(path)) ExplainBusy(path);
  return 1;
}

}  // namespace

void RegisterMount(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MountArgs>();
  CLI::App* cmd = app.add_subcommand("mount", "Mount the models as virtual .apr files");
  cmd->add_option("MOUNTPOINT", args->mountpoint, "An existing, empty folder")->required();
  args->sources.AddTo(*cmd);
  cmd->add_flag("-f,--foreground", args->foreground, "Stay in the foreground (logs to stderr)");
  cmd->add_option("-o", args->options,
                  "Mount options, comma-separated: FUSE ones (ro, allow_other, allow_root, "
                  "default_permissions, auto_unmount, max_read=N, fsname=NAME...) and every "
                  "option above as NAME=VALUE with '_' for '-' (source=DIR, no_hf_cache...); "
                  "fstab's _netdev, nofail, noauto, x-*, comment=, rw are ignored")
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
