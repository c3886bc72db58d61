#include "tests/integration/mount_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

extern char** environ;

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

// ----- crash cleanup ------------------------------------------------------------------------

constexpr int kMaxCrashEntries = 16;
struct CrashEntry {
  std::atomic<bool> used{false};
  std::atomic<pid_t> pid{-1};
  char path[1024] = {};
};
CrashEntry g_crash[kMaxCrashEntries];
std::mutex g_crash_mu;

const int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL,
                             SIGTERM, SIGINT, SIGHUP,  SIGQUIT};

// Async-signal-safe: kill daemons, lazily detach mounts, then die of the same signal.
void CrashHandler(int sig) {
  for (CrashEntry& entry : g_crash) {
    if (!entry.used.load()) continue;
    pid_t pid = entry.pid.load();
    if (pid > 0) kill(pid, SIGKILL);
    umount2(entry.path, MNT_DETACH);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kFatalSignals) {
      struct sigaction action {};
      action.sa_handler = CrashHandler;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESETHAND | SA_NODEFER;
      sigaction(sig, &action, nullptr);
    }
  });
}

void ResetSignalsInChild() {
  for (int sig : kFatalSignals) signal(sig, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
}

// ----- running processes --------------------------------------------------------------------

// Process groups of running commands, so the watchdog can kill them.
std::mutex g_active_mu;
std::set<pid_t> g_active_groups;

std::string MakeTempFile(int* fd) {
  std::string pattern = (fs::temp_directory_path() / "aprfs-itest-io-XXXXXX").string();
  *fd = mkostemp(pattern.data(), O_CLOEXEC);
  return *fd >= 0 ? pattern : "";
}

std::string ReadAndRemove(const std::string& path) {
  std::string text = SlurpOrEmpty(path);
  if (!path.empty()) unlink(path.c_str());
  return text;
}

// Waits for `pid` until `deadline`; SIGKILLs its group (and it) on timeout.
void WaitWithDeadline(pid_t pid, Millis timeout, ProcResult* result, bool kill_group) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  auto pause = 1ms;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      result->exit_code = -1;
      return;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      result->timed_out = true;
      if (kill_group) kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<Millis>(pause * 2, 20ms);
  }
  if (WIFEXITED(status) && !result->timed_out) {
    result->exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result->exit_code = -1;
    result->signal = WTERMSIG(status);
  }
}

std::vector<std::string> EnvironmentFor(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  for (const std::string& add : extra) env.push_back(add);
  return env;
}

ProcResult Spawn(const std::vector<std::string>& argv, Millis timeout,
                 const std::vector<std::string>& extra_env = {}) {
  ProcResult result;
  int out_fd = -1, err_fd = -1;
  std::string out_path = MakeTempFile(&out_fd);
  std::string err_path = MakeTempFile(&err_fd);
  if (out_fd < 0 || err_fd < 0) {
    result.err = "cannot create temporary files";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t no_signals, defaults;
  sigemptyset(&no_signals);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::vector<std::string> env = EnvironmentFor(extra_env);
  std::vector<char*> raw_env;
  for (std::string& e : env) raw_env.push_back(e.data());
  raw_env.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, raw[0], &actions, &attr, raw.data(), raw_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out_fd);
  close(err_fd);
  if (rc != 0) {
    result.err = "cannot start " + argv[0] + ": " + std::strerror(rc);
    ReadAndRemove(out_path);
    ReadAndRemove(err_path);
    return result;
  }
  {
    std::lock_guard lock(g_active_mu);
    g_active_groups.insert(pid);
  }
  WaitWithDeadline(pid, timeout, &result, true);
  {
    std::lock_guard lock(g_active_mu);
    g_active_groups.erase(pid);
  }
  result.out = ReadAndRemove(out_path);
  result.err = ReadAndRemove(err_path);
  return result;
}

std::string Trim(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, max / 2) + "\n[... " + std::to_string(text.size() - max) +
         " bytes cut ...]\n" + text.substr(text.size() - max / 2);
}

std::vector<std::string> ReadCmdline(pid_t pid) {
  std::string raw = SlurpOrEmpty("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  std::string current;
  for (char c : raw) {
    if (c == '\0') {
      args.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) args.push_back(current);
  return args;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() &&
        std::isdigit(static_cast<unsigned char>(field[i + 1]))) {
      out += static_cast<char>(std::stoi(field.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

uint64_t Le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

using RangeReader = std::function<bool(uint64_t offset, uint64_t length, std::string* out)>;

AprLayout ParseApr(const RangeReader& read, uint64_t file_size) {
  AprLayout layout;
  layout.file_size = file_size;
  std::string header;
  if (file_size < 64 || !read(0, 64, &header) || header.size() != 64) {
    layout.error = "file shorter than the 64-byte header";
    return layout;
  }
  if (header.compare(0, 4, std::string("APR\0", 4)) != 0) {
    layout.error = "bad magic";
    return layout;
  }
  layout.tensor_count = static_cast<uint32_t>(Le(header, 8, 4));
  layout.metadata_offset = Le(header, 12, 8);
  layout.metadata_size = static_cast<uint32_t>(Le(header, 20, 4));
  layout.index_offset = Le(header, 24, 8);
  layout.data_offset = Le(header, 32, 8);
  if (layout.metadata_offset + layout.metadata_size > file_size ||
      layout.index_offset > layout.data_offset || layout.data_offset > file_size) {
    layout.error = "header offsets out of range";
    return layout;
  }
  if (!read(layout.metadata_offset, layout.metadata_size, &layout.metadata_json)) {
    layout.error = "cannot read the metadata";
    return layout;
  }
  std::string index;
  if (!read(layout.index_offset, layout.data_offset - layout.index_offset, &index)) {
    layout.error = "cannot read the index";
    return layout;
  }
  size_t at = 0;
  for (uint32_t i = 0; i < layout.tensor_count; ++i) {
    auto need = [&](size_t n) { return at + n <= index.size(); };
    if (!need(2)) return layout.error = "index entry " + std::to_string(i) + " truncated", layout;
    size_t name_len = Le(index, at, 2);
    at += 2;
    if (!need(name_len + 2)) {
      return layout.error = "index entry " + std::to_string(i) + " name truncated", layout;
    }
    AprEntry entry;
    entry.name = index.substr(at, name_len);
    at += name_len;
    entry.dtype = static_cast<uint8_t>(index[at]);
    size_t ndim = static_cast<uint8_t>(index[at + 1]);
    at += 2;
    if (!need(8 * ndim + 16)) {
      return layout.error = "index entry " + std::to_string(i) + " shape truncated", layout;
    }
    for (size_t d = 0; d < ndim; ++d, at += 8) entry.shape.push_back(Le(index, at, 8));
    entry.offset = Le(index, at, 8);
    entry.size = Le(index, at + 8, 8);
    at += 16;
    layout.entries.push_back(std::move(entry));
  }
  return layout;
}

}  // namespace

// ----- processes ------------------------------------------------------------------------------

std::string ProcResult::Describe() const {
  std::ostringstream text;
  if (timed_out) {
    text << "TIMED OUT (killed)";
  } else if (signal) {
    text << "killed by signal " << signal << " (" << strsignal(signal) << ")";
  } else {
    text << "exit " << exit_code;
  }
  text << "\n--- stdout ---\n" << Trim(out, 6000) << "\n--- stderr ---\n" << Trim(err, 6000);
  return text.str();
}

std::string AprfsBinary() { return APRFS_BINARY; }
std::string ToolsDir() { return APRFS_TOOLS_DIR; }

ProcResult RunCommand(const std::vector<std::string>& argv, Millis timeout) {
  return Spawn(argv, timeout);
}

ProcResult RunAprfs(const std::vector<std::string>& args, Millis timeout) {
  std::vector<std::string> argv = {AprfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(argv, timeout);
}

ProcResult RunAprcheck(const std::string& file, const std::string& source_dir,
                       const std::vector<std::string>& extra, Millis timeout) {
  std::vector<std::string> argv = {"python3", ToolsDir() + "/aprcheck.py", file};
  if (!source_dir.empty()) {
    argv.push_back("--source");
    argv.push_back(source_dir);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return Spawn(argv, timeout, {"PYTHONDONTWRITEBYTECODE=1"});
}

ProcResult RunMakeModel(const std::vector<std::string>& args, Millis timeout) {
  std::vector<std::string> argv = {"python3", ToolsDir() + "/make_model.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(argv, timeout, {"PYTHONDONTWRITEBYTECODE=1"});
}

Child StartChild(const std::function<int()>& body) {
  Child child;
  int err_fd = -1;
  child.err_path = MakeTempFile(&err_fd);
  std::fflush(nullptr);
  child.pid = fork();
  if (child.pid == 0) {
    ResetSignalsInChild();
    if (err_fd >= 0) dup2(err_fd, 2);
    int code = 111;
    try {
      code = body();
    } catch (...) {
      code = 112;
    }
    _exit(code);
  }
  if (err_fd >= 0) close(err_fd);
  return child;
}

ProcResult WaitChild(Child& child, Millis timeout) {
  ProcResult result;
  if (child.pid <= 0) {
    result.err = "fork failed";
    return result;
  }
  WaitWithDeadline(child.pid, timeout, &result, false);
  child.pid = -1;
  result.err = ReadAndRemove(child.err_path);
  return result;
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  std::string stat = SlurpOrEmpty("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
  char state = stat[close_paren + 2];
  return state != 'Z' && state != 'X';
}

std::optional<uint64_t> ProcessRchar(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  uint64_t value;
  while (in >> key >> value) {
    if (key == "rchar:") return value;
  }
  return std::nullopt;
}

uint64_t ProcStatusKb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") == 0) {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

std::vector<pid_t> FindDaemonPids(const std::string& mountpoint) {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (!proc) return pids;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    std::vector<std::string> args = ReadCmdline(static_cast<pid_t>(pid));
    if (args.empty() || fs::path(args[0]).filename() != "aprfs") continue;
    bool is_mount = std::find(args.begin(), args.end(), "mount") != args.end();
    bool names_it = std::find(args.begin(), args.end(), mountpoint) != args.end();
    if (is_mount && names_it && ProcessAlive(static_cast<pid_t>(pid))) {
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(proc);
  return pids;
}

// ----- mounts ---------------------------------------------------------------------------------

std::vector<MountEntry> ReadMountInfo() {
  std::vector<MountEntry> mounts;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, field;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> field && field != "-") {
    }
    std::string fstype;
    fields >> fstype;
    mounts.push_back({device, Unescape(point), fstype});
  }
  return mounts;
}

std::optional<MountEntry> FindMount(const std::string& mountpoint) {
  std::optional<MountEntry> found;
  for (const MountEntry& m : ReadMountInfo()) {
    if (m.mountpoint == mountpoint) found = m;  // the last one is the visible one
  }
  return found;
}

bool IsAprfsMounted(const std::string& mountpoint) {
  std::optional<MountEntry> m = FindMount(mountpoint);
  return m && m->fstype == "fuse.aprfs";
}

void RegisterForCrashCleanup(const std::string& mountpoint, pid_t pid) {
  InstallCrashHandlers();
  std::lock_guard lock(g_crash_mu);
  for (CrashEntry& entry : g_crash) {
    if (entry.used.load() && mountpoint == entry.path) {
      if (pid > 0) entry.pid.store(pid);
      return;
    }
  }
  for (CrashEntry& entry : g_crash) {
    if (entry.used.load()) continue;
    std::snprintf(entry.path, sizeof(entry.path), "%s", mountpoint.c_str());
    entry.pid.store(pid);
    entry.used.store(true);
    return;
  }
}

void UnregisterFromCrashCleanup(const std::string& mountpoint) {
  std::lock_guard lock(g_crash_mu);
  for (CrashEntry& entry : g_crash) {
    if (entry.used.load() && mountpoint == entry.path) {
      entry.used.store(false);
      entry.pid.store(-1);
    }
  }
}

// ----- files ----------------------------------------------------------------------------------

Fd::Fd(const std::string& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC)) {}

Fd::~Fd() { Close(); }

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Fd::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int64_t PreadFull(int fd, char* dst, uint64_t length, uint64_t offset) {
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, dst + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return static_cast<int64_t>(done);
}

bool ReadWholeFile(const std::string& path, std::string* out, std::string* error, size_t chunk) {
  out->clear();
  Fd fd(path, O_RDONLY);
  if (!fd.ok()) {
    *error = "open " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    *error = "fstat " + path + ": " + std::strerror(errno);
    return false;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  out->resize(size);
  uint64_t done = 0;
  for (;;) {
    uint64_t want = std::min<uint64_t>(chunk, size - done);
    if (want == 0) break;
    ssize_t n = ::read(fd.get(), out->data() + done, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "read " + path + " at " + std::to_string(done) + ": " + std::strerror(errno);
      return false;
    }
    if (static_cast<uint64_t>(n) != want) {
      *error = "short read of " + path + ": " + std::to_string(n) + " of " + std::to_string(want) +
               " bytes at offset " + std::to_string(done) + " (file size " + std::to_string(size) +
               ")";
      return false;
    }
    done += static_cast<uint64_t>(n);
  }
  char probe;
  ssize_t extra = ::read(fd.get(), &probe, 1);
  if (extra != 0) {
    *error = "read past the stat size of " + path + " returned " + std::to_string(extra);
    return false;
  }
  return true;
}

std::string SlurpOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void DropPageCache(const std::string& path) {
  Fd fd(path, O_RDONLY);
  if (!fd.ok()) return;
  // Dirty pages (a file the test just wrote) cannot be dropped: write them back first, or they
  // stay cached for as long as writeback takes on a busy machine.
  fdatasync(fd.get());
  posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// ----- APR v2 ---------------------------------------------------------------------------------

const AprEntry* AprLayout::Find(const std::string& name) const {
  for (const AprEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

AprLayout ParseAprFile(const std::string& path) {
  Fd fd(path, O_RDONLY);
  AprLayout layout;
  if (!fd.ok()) {
    layout.error = "open " + path + ": " + std::strerror(errno);
    return layout;
  }
  struct stat st;
  fstat(fd.get(), &st);
  return ParseApr(
      [&](uint64_t offset, uint64_t length, std::string* out) {
        out->assign(length, '\0');
        return PreadFull(fd.get(), out->data(), length, offset) == static_cast<int64_t>(length);
      },
      static_cast<uint64_t>(st.st_size));
}

AprLayout ParseAprBytes(const std::string& bytes) {
  return ParseApr(
      [&](uint64_t offset, uint64_t length, std::string* out) {
        if (offset > bytes.size() || length > bytes.size() - offset) return false;
        *out = bytes.substr(offset, length);
        return true;
      },
      bytes.size());
}

int AprCodeOf(const std::string& dtype) {
  static const std::map<std::string, int> codes = {{"F32", 0}, {"F16", 1},  {"F64", 3},
                                                   {"I32", 4}, {"I64", 5},  {"I8", 6},
                                                   {"U8", 7},  {"BOOL", 7}, {"BF16", 30}};
  auto it = codes.find(dtype);
  return it == codes.end() ? -1 : it->second;
}

tw::TestModel BulkModel(int shards, uint64_t bytes_per_shard, uint32_t seed, bool unaligned) {
  tw::TestModel model;
  model.shard_layout.pad_header_to_8 = !unaligned;
  for (int k = 0; k < shards; ++k) {
    std::string p = "blk." + std::to_string(k) + ".";
    // Odd element counts so that no tensor ends on a 64-byte boundary.
    uint64_t big = bytes_per_shard / 2 / 2 * 2 + 1;  // BF16 elements, ~bytes_per_shard bytes
    std::vector<tw::TestTensor> tensors = {
        tw::MakeTensor(p + "norm.weight", "F32", {1001}, seed),
        tw::MakeTensor(p + "weight", "BF16", {big / 7, 7}, seed),
        tw::MakeTensor(p + "bias", "F16", {333}, seed),
        tw::MakeTensor(p + "odd", "U8", {4097}, seed),
    };
    model.shards.push_back(std::move(tensors));
  }
  return model;
}

ExpectedTensors ExpectedOf(const tw::TestModel& model, bool synthesized_lm_head) {
  ExpectedTensors out;
  for (const auto& shard : model.shards) {
    for (const tw::TestTensor& t : shard) out[t.name] = {t.dtype, t.shape, t.bytes};
  }
  if (synthesized_lm_head) out["lm_head.weight"] = out.at("model.embed_tokens.weight");
  return out;
}

std::optional<uint64_t> FirstDifference(const std::string& a, const std::string& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return i;
  }
  if (a.size() != b.size()) return n;
  return std::nullopt;
}

void ExpectLayoutMatches(const AprLayout& layout, const ExpectedTensors& expected) {
  ASSERT_EQ(layout.error, "") << "own parse of the APR header/index failed";
  EXPECT_EQ(layout.metadata_offset, 64u);
  EXPECT_EQ(layout.index_offset % 64, 0u);
  EXPECT_EQ(layout.data_offset % 64, 0u);
  EXPECT_EQ(layout.entries.size(), expected.size());
  for (size_t i = 1; i < layout.entries.size(); ++i) {
    EXPECT_LT(layout.entries[i - 1].name, layout.entries[i].name)
        << "index not strictly sorted by name bytes at entry " << i;
  }
  for (const auto& [name, want] : expected) {
    const AprEntry* e = layout.Find(name);
    if (!e) {
      ADD_FAILURE() << "tensor '" << name << "' missing from the mounted index";
      continue;
    }
    EXPECT_EQ(e->dtype, AprCodeOf(want.dtype)) << name << " (" << want.dtype << ")";
    EXPECT_EQ(e->shape, want.shape) << name;
    EXPECT_EQ(e->size, want.bytes.size()) << name;
    EXPECT_EQ(e->offset % 64, 0u) << name;
    EXPECT_LE(layout.data_offset + e->offset + e->size + 4, layout.file_size) << name;
  }
  for (const AprEntry& e : layout.entries) {
    EXPECT_TRUE(expected.count(e.name)) << "unexpected tensor '" << e.name << "' in the index";
  }
}

void ExpectTensorBytes(const AprLayout& layout, const ExpectedTensors& expected,
                       const std::string& file_bytes, const std::string& how) {
  for (const AprEntry& e : layout.entries) {
    auto want = expected.find(e.name);
    if (want == expected.end()) continue;
    uint64_t at = layout.data_offset + e.offset;
    if (at + e.size > file_bytes.size()) {
      ADD_FAILURE() << how << ": tensor '" << e.name << "' extends past the bytes read";
      continue;
    }
    std::string got = file_bytes.substr(at, e.size);
    std::optional<uint64_t> diff = FirstDifference(got, want->second.bytes);
    EXPECT_FALSE(diff.has_value()) << how << ": tensor '" << e.name << "' (" << e.size
                                   << " bytes at file offset " << at << ") differs from the "
                                   << "source at byte " << diff.value_or(0);
  }
}

void VerifyMountedModel(const std::string& apr_path, const std::string& source_dir,
                        const ExpectedTensors& expected) {
  SCOPED_TRACE("mounted file " + apr_path);
  struct stat st;
  ASSERT_EQ(stat(apr_path.c_str(), &st), 0) << apr_path << ": " << std::strerror(errno);
  ASSERT_TRUE(S_ISREG(st.st_mode));
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  // 1. read(2), sequential, cold cache.
  DropPageCache(apr_path);
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(apr_path, &bytes, &error)) << error;
  ASSERT_EQ(bytes.size(), size);
  AprLayout layout = ParseAprBytes(bytes);
  ASSERT_NO_FATAL_FAILURE(ExpectLayoutMatches(layout, expected));
  ExpectTensorBytes(layout, expected, bytes, "read()");

  // 2. Buffered pread of each tensor at its exact range, cold cache.
  DropPageCache(apr_path);
  {
    Fd fd(apr_path, O_RDONLY);
    ASSERT_TRUE(fd.ok()) << std::strerror(errno);
    for (const AprEntry& e : layout.entries) {
      const ExpectedTensor& want = expected.at(e.name);
      std::string got(e.size, '\0');
      int64_t n = PreadFull(fd.get(), got.data(), e.size, layout.data_offset + e.offset);
      ASSERT_EQ(n, static_cast<int64_t>(e.size)) << "pread of '" << e.name << "'";
      EXPECT_EQ(FirstDifference(got, want.bytes), std::nullopt) << "pread of '" << e.name << "'";
    }
  }

  // 3. O_DIRECT pread: bypasses the page cache, so the daemon sees these exact, unaligned
  // offsets and lengths. Per tensor, then a sweep of the whole file in odd-sized pieces.
  {
    Fd fd(apr_path, O_RDONLY | O_DIRECT);
    if (!fd.ok() && errno == EINVAL) {
      std::fprintf(stderr, "note: O_DIRECT not supported on this mount; skipped\n");
    } else {
      ASSERT_TRUE(fd.ok()) << "open O_DIRECT: " << std::strerror(errno);
      for (const AprEntry& e : layout.entries) {
        const ExpectedTensor& want = expected.at(e.name);
        std::string got(e.size, '\0');
        int64_t n = PreadFull(fd.get(), got.data(), e.size, layout.data_offset + e.offset);
        ASSERT_EQ(n, static_cast<int64_t>(e.size)) << "O_DIRECT pread of '" << e.name << "'";
        EXPECT_EQ(FirstDifference(got, want.bytes), std::nullopt)
            << "O_DIRECT pread of '" << e.name << "'";
      }
      const uint64_t piece = size > (4u << 20) ? 1048573 : 4093;  // primes
      std::string sweep(size, '\0');
      for (uint64_t at = 0; at < size; at += piece) {
        uint64_t n = std::min(piece, size - at);
        ssize_t got = ::pread(fd.get(), sweep.data() + at, n, static_cast<off_t>(at));
        ASSERT_EQ(got, static_cast<ssize_t>(n))
            << "O_DIRECT pread of " << n << " bytes at " << at << ": " << std::strerror(errno);
      }
      EXPECT_EQ(FirstDifference(sweep, bytes), std::nullopt)
          << "O_DIRECT sweep differs from read()";
      char past[16];
      EXPECT_EQ(::pread(fd.get(), past, sizeof(past), static_cast<off_t>(size)), 0)
          << "read at end of file";
      EXPECT_EQ(::pread(fd.get(), past, sizeof(past), static_cast<off_t>(size - 2)), 2)
          << "read across end of file";
    }
  }

  // 4. mmap, in a child process so that a SIGBUS (a failed page-in) fails the test instead of
  // killing the test binary.
  DropPageCache(apr_path);
  {
    Child child = StartChild([&]() -> int {
      Fd fd(apr_path, O_RDONLY);
      if (!fd.ok()) return 2;
      void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (map == MAP_FAILED) return 3;
      const char* base = static_cast<const char*>(map);
      int bad = 0;
      for (const AprEntry& e : layout.entries) {
        const std::string& want = expected.at(e.name).bytes;
        if (std::memcmp(base + layout.data_offset + e.offset, want.data(), want.size()) != 0) {
          dprintf(2, "mmap: tensor '%s' differs from the source\n", e.name.c_str());
          ++bad;
        }
      }
      if (std::memcmp(base, bytes.data(), size) != 0) {
        dprintf(2, "mmap: whole mapping differs from read()\n");
        ++bad;
      }
      munmap(map, size);
      return bad ? 1 : 0;
    });
    ProcResult r = WaitChild(child, 60s);
    EXPECT_EQ(r.exit_code, 0) << "mmap reader: " << r.Describe();
  }

  // 5. The independent checker: JSON report cross-checked with our own parse, then --mmap.
  ProcResult check = RunAprcheck(apr_path, source_dir, {"--json"});
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  nlohmann::json report = nlohmann::json::parse(check.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << "aprcheck --json output is not JSON: " << check.out;
  EXPECT_EQ(report.value("ok", false), true) << report.dump(2);
  EXPECT_EQ(report.value("tensors", -1), static_cast<int>(layout.entries.size()));
  EXPECT_EQ(report.value("data_offset", uint64_t{0}), layout.data_offset);
  EXPECT_EQ(report.value("tensor_index_offset", uint64_t{0}), layout.index_offset);
  EXPECT_EQ(report.value("file_size", uint64_t{0}), size);
  EXPECT_EQ(report.value("footer", std::string()), "ok");
  ProcResult mapped = RunAprcheck(apr_path, source_dir, {"--mmap"});
  EXPECT_EQ(mapped.exit_code, 0) << mapped.Describe();
}

// ----- the fixture ----------------------------------------------------------------------------

void MountTest::SetUp() {
  InstallCrashHandlers();
  std::string pattern = (fs::temp_directory_path() / "aprfs-itest-XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
  root_ = pattern;
  models_dir_ = root_ + "/models";
  mountpoint_ = root_ + "/mnt";
  work_dir_ = root_ + "/work";
  log_file_ = root_ + "/daemon.log";
  daemon_out_ = root_ + "/daemon.out";
  fs::create_directories(models_dir_);
  fs::create_directories(mountpoint_);
  fs::create_directories(work_dir_);
  StartWatchdog(90s);
}

void MountTest::StartWatchdog(std::chrono::seconds budget) {
  {
    std::lock_guard lock(watchdog_mu_);
    watchdog_deadline_ = std::chrono::steady_clock::now() + budget;
    watchdog_stop_ = false;
  }
  watchdog_ = std::thread([this] {
    std::unique_lock lock(watchdog_mu_);
    while (!watchdog_stop_) {
      if (watchdog_cv_.wait_until(lock, watchdog_deadline_) == std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= watchdog_deadline_ && !watchdog_stop_) {
        watchdog_fired_ = true;
        std::fprintf(stderr,
                     "WATCHDOG: test exceeded its time budget; killing the daemon and running "
                     "commands so blocked calls return\n");
        if (daemon_pid_ > 0) kill(daemon_pid_, SIGKILL);
        std::vector<std::string> points = adopted_;
        points.push_back(mountpoint_);
        for (const std::string& point : points) {
          for (pid_t pid : FindDaemonPids(point)) kill(pid, SIGKILL);
        }
        std::lock_guard active(g_active_mu);
        for (pid_t group : g_active_groups) kill(-group, SIGKILL);
        watchdog_deadline_ = std::chrono::steady_clock::now() + 5s;  // keep killing
      }
    }
  });
}

void MountTest::SetWatchdog(std::chrono::seconds budget) {
  std::lock_guard lock(watchdog_mu_);
  watchdog_deadline_ = std::chrono::steady_clock::now() + budget;
  watchdog_cv_.notify_all();
}

void MountTest::StopWatchdog() {
  {
    std::lock_guard lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void MountTest::Mount(const std::vector<std::string>& args) {
  ASSERT_LT(daemon_pid_, 0) << "already mounted";
  std::vector<std::string> argv = {AprfsBinary(), "mount", mountpoint_, "-f"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--log-file", log_file_, "--log-level", "debug"});

  int out_fd = ::open(daemon_out_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(out_fd, 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, raw[0], &actions, &attr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out_fd);
  ASSERT_EQ(rc, 0) << "cannot start " << argv[0] << ": " << std::strerror(rc);
  daemon_pid_ = pid;
  daemon_reaped_ = false;
  RegisterForCrashCleanup(mountpoint_, pid);

  auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    if (IsAprfsMounted(mountpoint_)) break;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      daemon_reaped_ = true;
      daemon_status_ = status;
      daemon_pid_ = -1;
      FAIL() << "the daemon exited (status " << status << ") before " << mountpoint_
             << " became a fuse.aprfs mount\n"
             << DaemonLog();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL() << "timed out after 20 s waiting for " << mountpoint_
             << " to appear in /proc/self/mountinfo as fuse.aprfs\n"
             << DaemonLog();
    }
    std::this_thread::sleep_for(5ms);
  }
  struct stat st;
  ASSERT_EQ(stat(mountpoint_.c_str(), &st), 0)
      << "mounted but the root does not answer: " << std::strerror(errno) << "\n"
      << DaemonLog();
  ASSERT_TRUE(S_ISDIR(st.st_mode));
}

bool MountTest::DaemonAlive() {
  if (daemon_pid_ <= 0 || daemon_reaped_) return false;
  int status = 0;
  pid_t r = waitpid(daemon_pid_, &status, WNOHANG);
  if (r == daemon_pid_) {
    daemon_reaped_ = true;
    daemon_status_ = status;
    return false;
  }
  return r == 0;
}

std::string MountTest::DaemonState() {
  std::string state;
  if (DaemonAlive()) {
    state = "the daemon is running";
  } else if (daemon_reaped_ && WIFSIGNALED(daemon_status_)) {
    state = "the daemon was killed by signal " + std::to_string(WTERMSIG(daemon_status_)) + " (" +
            strsignal(WTERMSIG(daemon_status_)) + ")";
  } else if (daemon_reaped_ && WIFEXITED(daemon_status_)) {
    state = "the daemon exited with status " + std::to_string(WEXITSTATUS(daemon_status_));
  } else {
    state = "the daemon is not running";
  }
  return state + " (its log is printed at teardown)";
}

std::optional<int> MountTest::WaitDaemonExit(Millis timeout) {
  if (daemon_reaped_) return daemon_status_;
  if (daemon_pid_ <= 0) return std::nullopt;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    pid_t r = waitpid(daemon_pid_, &status, WNOHANG);
    if (r == daemon_pid_) {
      daemon_reaped_ = true;
      daemon_status_ = status;
      return status;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
  return std::nullopt;
}

std::string MountTest::DaemonLog() const {
  return "--- daemon log (" + log_file_ + ") ---\n" + Trim(SlurpOrEmpty(log_file_), 8000) +
         "\n--- daemon stdout/stderr ---\n" + Trim(SlurpOrEmpty(daemon_out_), 4000);
}

void MountTest::CleanupMountpoint(const std::string& mountpoint,
                                  std::vector<std::string>* problems) {
  if (FindMount(mountpoint)) {
    ProcResult r = RunAprfs({"umount", mountpoint}, 15s);
    if (FindMount(mountpoint)) {
      problems->push_back("`aprfs umount " + mountpoint + "` did not unmount: " + r.Describe() +
                          "; detaching lazily");
      for (int i = 0; i < 8 && FindMount(mountpoint); ++i) {
        umount2(mountpoint.c_str(), MNT_DETACH);
      }
    }
  }
  if (FindMount(mountpoint)) problems->push_back(mountpoint + " is still mounted");
}

bool MountTest::Unmount(std::string* problem) {
  std::vector<std::string> problems;
  CleanupMountpoint(mountpoint_, &problems);
  if (daemon_pid_ > 0 && !daemon_reaped_) {
    ProcResult r;
    WaitWithDeadline(daemon_pid_, 10s, &r, false);
    if (r.timed_out) problems.push_back("the daemon did not exit within 10 s of the unmount");
    daemon_reaped_ = true;
  }
  // Background daemons of this mountpoint (not our children).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!FindDaemonPids(mountpoint_).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  for (pid_t pid : FindDaemonPids(mountpoint_)) {
    problems.push_back("daemon " + std::to_string(pid) + " still running; killed");
    kill(pid, SIGKILL);
  }
  daemon_pid_ = -1;
  UnregisterFromCrashCleanup(mountpoint_);
  if (problem) {
    problem->clear();
    for (const std::string& p : problems) *problem += p + "\n";
  }
  return problems.empty();
}

void MountTest::AdoptMount(const std::string& mountpoint) {
  {
    std::lock_guard lock(watchdog_mu_);
    adopted_.push_back(mountpoint);
  }
  RegisterForCrashCleanup(mountpoint, -1);
}

void MountTest::TearDown() {
  std::vector<std::string> problems;
  std::string problem;
  if (!Unmount(&problem)) problems.push_back(problem);
  for (const std::string& point : adopted_) {
    CleanupMountpoint(point, &problems);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!FindDaemonPids(point).empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    for (pid_t pid : FindDaemonPids(point)) {
      problems.push_back("background daemon " + std::to_string(pid) + " of " + point +
                         " still running after the unmount; killed");
      kill(pid, SIGKILL);
    }
    UnregisterFromCrashCleanup(point);
  }
  StopWatchdog();
  if (watchdog_fired_) problems.push_back("the watchdog fired: the test ran out of time");

  // Nothing may stay mounted below the scratch folder; only then is it safe to delete it.
  bool still_mounted = false;
  for (const MountEntry& m : ReadMountInfo()) {
    if (!root_.empty() && m.mountpoint.rfind(root_ + "/", 0) == 0) {
      umount2(m.mountpoint.c_str(), MNT_DETACH);
      problems.push_back("left mounted: " + m.mountpoint + " (" + m.fstype + "), detached");
    }
  }
  for (const MountEntry& m : ReadMountInfo()) {
    if (!root_.empty() && m.mountpoint.rfind(root_ + "/", 0) == 0) still_mounted = true;
  }
  if (HasFailure() || !problems.empty()) {
    std::string log = SlurpOrEmpty(log_file_);
    if (!log.empty()) std::fprintf(stderr, "%s\n", DaemonLog().c_str());
  }
  if (!still_mounted && !root_.empty()) {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  for (const std::string& p : problems) ADD_FAILURE() << "teardown: " << p;
}

}  // namespace aprfs_itest
