#include "tests/remote/remote_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/model_writer.h"

extern char** environ;

namespace aprfs_rtest {
namespace {

namespace fs = std::filesystem;
namespace tw = aprfs::testing;

// ----- crash cleanup --------------------------------------------------------------------------

constexpr int kMaxCrashEntries = 64;
struct CrashEntry {
  std::atomic<bool> used{false};
  std::atomic<pid_t> pid{-1};  // killed (negative: a process group)
  char path[512] = {};         // lazily detached when non-empty
};
CrashEntry g_crash[kMaxCrashEntries];
std::mutex g_crash_mu;

const int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL,
                             SIGTERM, SIGINT, SIGHUP,  SIGQUIT};

void CrashHandler(int sig) {
  for (CrashEntry& entry : g_crash) {
    if (!entry.used.load()) continue;
    pid_t pid = entry.pid.load();
    if (pid != -1 && pid != 0) kill(pid, SIGKILL);
    if (entry.path[0]) umount2(entry.path, MNT_DETACH);
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

int RegisterCrash(pid_t pid, const std::string& path) {
  InstallCrashHandlers();
  std::lock_guard lock(g_crash_mu);
  for (int i = 0; i < kMaxCrashEntries; ++i) {
    CrashEntry& entry = g_crash[i];
    if (entry.used.load()) continue;
    std::snprintf(entry.path, sizeof(entry.path), "%s", path.c_str());
    entry.pid.store(pid);
    entry.used.store(true);
    return i;
  }
  return -1;
}

void UnregisterCrash(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(g_crash_mu);
  g_crash[slot].used.store(false);
  g_crash[slot].pid.store(-1);
  g_crash[slot].path[0] = '\0';
}

// ----- processes ------------------------------------------------------------------------------

std::mutex g_active_mu;
std::set<pid_t> g_active_groups;  // running commands, killed by the watchdog

std::string MakeTempFile(int* fd) {
  std::string pattern = (fs::temp_directory_path() / "aprfs-rtest-io-XXXXXX").string();
  *fd = mkostemp(pattern.data(), O_CLOEXEC);
  return *fd >= 0 ? pattern : "";
}

std::string ReadAndRemove(const std::string& path) {
  std::string text = SlurpOrEmpty(path);
  if (!path.empty()) unlink(path.c_str());
  return text;
}

void WaitWithDeadline(pid_t pid, Millis timeout, ProcResult* result, bool kill_group) {
  auto deadline = Clock::now() + timeout;
  int status = 0;
  auto pause = 1ms;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      result->exit_code = -1;
      return;
    }
    if (Clock::now() > deadline) {
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

// The sandbox every command gets as HOME-like folders, so no real config, token or cache of
// the machine is ever read.
std::string SandboxDir();

struct Spawned {
  pid_t pid = -1;
  std::string error;
};

// posix_spawn with stdin /dev/null, stdout/stderr to out_fd/err_fd, no other descriptor of ours
// (daemons it starts may outlive it: they must not hold a test's pipes or sockets), in a new
// process group.
Spawned SpawnProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t no_signals, defaults;
  sigemptyset(&no_signals);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::vector<std::string> full_env = CleanEnvironment(env);
  std::vector<char*> raw_env;
  for (std::string& e : full_env) raw_env.push_back(e.data());
  raw_env.push_back(nullptr);
  Spawned spawned;
  int rc = posix_spawnp(&spawned.pid, raw[0], &actions, &attr, raw.data(), raw_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    spawned.pid = -1;
    spawned.error = "cannot start " + argv[0] + ": " + std::strerror(rc);
  }
  return spawned;
}

std::string Trim(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, max / 2) + "\n[... " + std::to_string(text.size() - max) +
         " bytes cut ...]\n" + text.substr(text.size() - max / 2);
}

uint64_t Le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

// ----- shared models --------------------------------------------------------------------------

std::mutex g_models_mu;
std::string g_models_root;

std::string ModelsRoot() {
  std::lock_guard lock(g_models_mu);
  if (g_models_root.empty()) {
    std::string pattern = (fs::temp_directory_path() / "aprfs-rtest-models-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    g_models_root = pattern;
    fs::create_directories(g_models_root + "/sandbox/config");
    fs::create_directories(g_models_root + "/sandbox/cache");
    fs::create_directories(g_models_root + "/sandbox/hf-home");
  }
  return g_models_root;
}

std::string SandboxDir() { return ModelsRoot() + "/sandbox"; }

class ModelsCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard lock(g_models_mu);
    if (!g_models_root.empty() && !std::getenv("APRFS_KEEP_TEST_DIRS")) {
      std::error_code ec;
      fs::remove_all(g_models_root, ec);
      g_models_root.clear();
    }
  }
};
[[maybe_unused]] ::testing::Environment* const g_models_cleanup =
    ::testing::AddGlobalTestEnvironment(new ModelsCleanup);

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
  text << " after " << seconds << " s\n--- stdout ---\n"
       << Trim(out, 6000) << "\n--- stderr ---\n"
       << Trim(err, 6000);
  return text.str();
}

std::vector<std::string> CleanEnvironment(const std::vector<std::string>& extra) {
  auto dropped = [](const std::string& name) {
    // AWS_*: the S3 tests say which credentials, profile and endpoint a daemon gets.
    static const char* prefixes[] = {"HF_", "HUGGING_FACE_", "HUGGINGFACE_", "AWS_"};
    for (const char* p : prefixes) {
      if (name.rfind(p, 0) == 0) return true;
    }
    return name == "TRANSFORMERS_OFFLINE" || name == "XDG_CONFIG_HOME" ||
           name == "XDG_CACHE_HOME" || name == "APRFS_NOSYNC";
  };
  std::vector<std::pair<std::string, std::string>> vars;
  auto set = [&](const std::string& entry) {
    size_t eq = entry.find('=');
    std::string name = entry.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    for (auto& [n, v] : vars) {
      if (n == name) {
        v = value;
        return;
      }
    }
    vars.emplace_back(name, value);
  };
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!dropped(entry.substr(0, entry.find('=')))) set(entry);
  }
  std::string sandbox = SandboxDir();
  set("XDG_CONFIG_HOME=" + sandbox + "/config");
  set("XDG_CACHE_HOME=" + sandbox + "/cache");
  set("HF_HOME=" + sandbox + "/hf-home");
  set("HF_TOKEN_PATH=" + sandbox + "/no-such-token");
  set("PYTHONDONTWRITEBYTECODE=1");
  for (const std::string& entry : extra) set(entry);
  std::vector<std::string> out;
  for (const auto& [n, v] : vars) out.push_back(n + "=" + v);
  return out;
}

ProcResult RunCommand(const std::vector<std::string>& argv, Millis timeout,
                      const std::vector<std::string>& env) {
  ProcResult result;
  auto start = Clock::now();
  int out_fd = -1, err_fd = -1;
  std::string out_path = MakeTempFile(&out_fd);
  std::string err_path = MakeTempFile(&err_fd);
  if (out_fd < 0 || err_fd < 0) {
    result.err = "cannot create temporary files";
    return result;
  }
  Spawned spawned = SpawnProcess(argv, env, out_fd, err_fd);
  close(out_fd);
  close(err_fd);
  if (spawned.pid < 0) {
    result.err = spawned.error;
    ReadAndRemove(out_path);
    ReadAndRemove(err_path);
    return result;
  }
  {
    std::lock_guard lock(g_active_mu);
    g_active_groups.insert(spawned.pid);
  }
  int slot = RegisterCrash(-spawned.pid, "");
  WaitWithDeadline(spawned.pid, timeout, &result, true);
  UnregisterCrash(slot);
  {
    std::lock_guard lock(g_active_mu);
    g_active_groups.erase(spawned.pid);
  }
  result.out = ReadAndRemove(out_path);
  result.err = ReadAndRemove(err_path);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

std::string AprfsBinary() { return APRFS_BINARY; }
std::string ToolsDir() { return APRFS_TOOLS_DIR; }

ProcResult RunAprfs(const std::vector<std::string>& args, const std::vector<std::string>& env,
                    Millis timeout) {
  std::vector<std::string> argv = {AprfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout, env);
}

ProcResult RunAprcheck(const std::string& file, const std::string& source_dir,
                       const std::vector<std::string>& extra, Millis timeout) {
  std::vector<std::string> argv = {"python3", ToolsDir() + "/aprcheck.py", file};
  if (!source_dir.empty()) {
    argv.push_back("--source");
    argv.push_back(source_dir);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunCommand(argv, timeout);
}

ProcResult Curl(const std::vector<std::string>& args, Millis timeout) {
  std::vector<std::string> argv = {
      "curl", "-s", "--max-time", std::to_string(std::max<int64_t>(1, timeout.count() / 1000 - 1))};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
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

// ----- files ----------------------------------------------------------------------------------

Fd::Fd(const std::string& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC)) {}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
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

bool ReadWholeFile(const std::string& path, std::string* out, std::string* error) {
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
  while (done < size) {
    uint64_t want = std::min<uint64_t>(1 << 20, size - done);
    ssize_t n = ::read(fd.get(), out->data() + done, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "read " + path + " at " + std::to_string(done) + ": " + std::strerror(errno);
      return false;
    }
    if (static_cast<uint64_t>(n) != want) {
      *error = "short read of " + path + ": " + std::to_string(n) + " of " + std::to_string(want) +
               " bytes at offset " + std::to_string(done);
      return false;
    }
    done += static_cast<uint64_t>(n);
  }
  return true;
}

int ReadRange(const std::string& path, uint64_t offset, uint64_t length, std::string* out,
              double* seconds) {
  auto start = Clock::now();
  auto finish = [&](int code) {
    if (seconds) *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return code;
  };
  Fd fd(path, O_RDONLY | O_DIRECT);
  if (!fd.ok() && errno == EINVAL) {
    DropPageCache(path);
    fd = Fd(path, O_RDONLY);
  }
  if (!fd.ok()) return finish(errno);
  out->assign(length, '\0');
  int64_t n = PreadFull(fd.get(), out->data(), length, offset);
  if (n < 0) return finish(static_cast<int>(-n));
  if (static_cast<uint64_t>(n) != length) {
    out->resize(static_cast<size_t>(n));
    return finish(-1);
  }
  return finish(0);
}

std::string SlurpOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
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
  if (fd.ok()) posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// ----- models ---------------------------------------------------------------------------------

uint64_t SourceModel::ShardSize(const std::string& shard) const {
  return FileSize(ShardPath(shard));
}

std::string SourceModel::TensorBytes(const std::string& name) const {
  const SourceTensor& t = tensors.at(name);
  Fd fd(ShardPath(t.shard), O_RDONLY);
  std::string bytes(t.size, '\0');
  if (!fd.ok() ||
      PreadFull(fd.get(), bytes.data(), t.size, t.shard_offset) != static_cast<int64_t>(t.size)) {
    throw std::runtime_error("cannot read tensor " + name + " from " + ShardPath(t.shard));
  }
  return bytes;
}

SourceModel ParseSourceModel(const std::string& dir) {
  SourceModel model;
  model.dir = dir;
  for (const std::string& name : ListDir(dir)) {
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) {
      model.shards.push_back(name);
    }
  }
  for (const std::string& shard : model.shards) {
    std::string path = dir + "/" + shard;
    Fd fd(path, O_RDONLY);
    std::string prefix(8, '\0');
    if (!fd.ok() || PreadFull(fd.get(), prefix.data(), 8, 0) != 8) {
      throw std::runtime_error("cannot read " + path);
    }
    uint64_t n = Le(prefix, 0, 8);
    std::string header(n, '\0');
    if (PreadFull(fd.get(), header.data(), n, 8) != static_cast<int64_t>(n)) {
      throw std::runtime_error("cannot read the header of " + path);
    }
    json parsed = json::parse(header);
    for (const auto& [name, value] : parsed.items()) {
      if (name == "__metadata__") continue;
      SourceTensor t;
      t.name = name;
      t.dtype = value.at("dtype").get<std::string>();
      t.shape = value.at("shape").get<std::vector<uint64_t>>();
      uint64_t begin = value.at("data_offsets").at(0).get<uint64_t>();
      uint64_t end = value.at("data_offsets").at(1).get<uint64_t>();
      t.shard = shard;
      t.shard_offset = 8 + n + begin;
      t.size = end - begin;
      model.tensors[name] = t;
    }
  }
  return model;
}

const SourceModel& TinyModel() {
  static std::once_flag once;
  static SourceModel model;
  std::call_once(once, [] {
    std::string dir = ModelsRoot() + "/tiny";
    ProcResult r =
        RunCommand({"python3", ToolsDir() + "/make_model.py", dir, "--preset", "tiny"}, 120s);
    if (r.exit_code != 0) throw std::runtime_error("make_model.py failed: " + r.Describe());
    model = ParseSourceModel(dir);
  });
  return model;
}

const SourceModel& BigModel() {
  static std::once_flag once;
  static SourceModel model;
  std::call_once(once, [] {
    std::string dir = ModelsRoot() + "/big";
    const uint64_t sizes[3] = {20000003, 18874371, 21000017};
    {
      tw::TestModel writer;
      for (int k = 0; k < 3; ++k) {
        std::string p = "blk." + std::to_string(k) + ".";
        writer.shards.push_back({tw::MakeTensor(p + "norm", "F32", {1001}, 7),
                                 tw::MakeTensor(p + "weight", "U8", {sizes[k]}, 7)});
      }
      tw::WriteModel(dir, writer);
    }
    model = ParseSourceModel(dir);
  });
  return model;
}

const SourceModel& SingleModel() {
  static std::once_flag once;
  static SourceModel model;
  std::call_once(once, [] {
    std::string dir = ModelsRoot() + "/single";
    {
      tw::TestModel writer;
      writer.layout = tw::TestModel::Layout::Single;
      writer.shards.push_back({tw::MakeTensor("w.norm", "F32", {777}, 3),
                               tw::MakeTensor("w.weight", "U8", {20500001}, 3)});
      tw::WriteModel(dir, writer);
    }
    model = ParseSourceModel(dir);
  });
  return model;
}

const SourceModel& LargeSingleModel() {
  static std::once_flag once;
  static SourceModel model;
  std::call_once(once, [] {
    std::string dir = ModelsRoot() + "/large-single";
    {
      tw::TestModel writer;
      writer.layout = tw::TestModel::Layout::Single;
      writer.shards.push_back({tw::MakeTensor("l.norm", "F32", {333}, 5),
                               tw::MakeTensor("l.weight", "U8", {9 * kChunk + 4000037}, 5)});
      tw::WriteModel(dir, writer);
    }
    model = ParseSourceModel(dir);
  });
  return model;
}

SourceModel CopyModel(const SourceModel& model, const std::string& dir) {
  fs::create_directories(dir);
  for (const std::string& name : ListDir(model.dir)) {
    fs::copy_file(model.dir + "/" + name, dir + "/" + name, fs::copy_options::overwrite_existing);
  }
  return ParseSourceModel(dir);
}

std::string Sha256OfFile(const std::string& path) {
  ProcResult r = RunCommand({"sha256sum", path}, 60s);
  if (r.exit_code != 0 || r.out.size() < 64) return "";
  return r.out.substr(0, 64);
}

// ----- APR ------------------------------------------------------------------------------------

const AprEntry* AprLayout::Find(const std::string& name) const {
  for (const AprEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

AprLayout ParseAprBytes(const std::string& bytes) {
  AprLayout layout;
  layout.file_size = bytes.size();
  if (bytes.size() < 64) return layout.error = "file shorter than the 64-byte header", layout;
  if (bytes.compare(0, 4, std::string("APR\0", 4)) != 0) return layout.error = "bad magic", layout;
  uint32_t tensor_count = static_cast<uint32_t>(Le(bytes, 8, 4));
  uint64_t index_offset = Le(bytes, 24, 8);
  layout.data_offset = Le(bytes, 32, 8);
  if (index_offset > layout.data_offset || layout.data_offset > bytes.size()) {
    return layout.error = "header offsets out of range", layout;
  }
  size_t at = index_offset;
  const size_t end = layout.data_offset;
  for (uint32_t i = 0; i < tensor_count; ++i) {
    auto need = [&](size_t n) { return at + n <= end; };
    if (!need(2)) return layout.error = "index entry " + std::to_string(i) + " truncated", layout;
    size_t name_len = Le(bytes, at, 2);
    at += 2;
    if (!need(name_len + 2)) return layout.error = "index entry name truncated", layout;
    AprEntry entry;
    entry.name = bytes.substr(at, name_len);
    at += name_len;
    entry.dtype = static_cast<uint8_t>(bytes[at]);
    size_t ndim = static_cast<uint8_t>(bytes[at + 1]);
    at += 2;
    if (!need(8 * ndim + 16)) return layout.error = "index entry shape truncated", layout;
    for (size_t d = 0; d < ndim; ++d, at += 8) entry.shape.push_back(Le(bytes, at, 8));
    entry.offset = Le(bytes, at, 8);
    entry.size = Le(bytes, at + 8, 8);
    at += 16;
    layout.entries.push_back(std::move(entry));
  }
  return layout;
}

AprLayout ParseAprFile(const std::string& path) {
  // Header first, then exactly the prefix up to data_offset, with O_DIRECT: a buffered read
  // would let the kernel's readahead pull tensor data (remote chunks) behind the test's back.
  AprLayout layout;
  const uint64_t size = FileSize(path);
  std::string header;
  if (int err = ReadRange(path, 0, 64, &header)) {
    return layout.error =
               "cannot read the header: " + std::string(err > 0 ? std::strerror(err) : "short"),
           layout;
  }
  uint64_t data_offset = Le(header, 32, 8);
  if (data_offset > size || data_offset > (64u << 20)) {
    return layout.error = "data_offset out of range", layout;
  }
  std::string prefix;
  if (int err = ReadRange(path, 0, data_offset, &prefix)) {
    return layout.error =
               "cannot read the index: " + std::string(err > 0 ? std::strerror(err) : "short"),
           layout;
  }
  layout = ParseAprBytes(prefix);
  layout.file_size = size;
  return layout;
}

int AprCodeOf(const std::string& dtype) {
  static const std::map<std::string, int> codes = {{"F32", 0}, {"F16", 1},  {"F64", 3},
                                                   {"I32", 4}, {"I64", 5},  {"I8", 6},
                                                   {"U8", 7},  {"BOOL", 7}, {"BF16", 30}};
  auto it = codes.find(dtype);
  return it == codes.end() ? -1 : it->second;
}

std::vector<std::string> CheckAprBytes(const std::string& bytes, const SourceModel& model) {
  std::vector<std::string> problems;
  AprLayout layout = ParseAprBytes(bytes);
  if (!layout.error.empty()) return {"APR parse: " + layout.error};
  uint64_t data_end = layout.data_offset;
  for (const AprEntry& e : layout.entries) {
    data_end = std::max(data_end, layout.data_offset + (e.offset + e.size + 63) / 64 * 64);
    if (!model.tensors.count(e.name) && e.name != "lm_head.weight") {
      problems.push_back("unexpected tensor " + e.name);
    }
  }
  for (const auto& [name, t] : model.tensors) {
    const AprEntry* e = layout.Find(name);
    if (!e) {
      problems.push_back("tensor " + name + " missing");
      continue;
    }
    if (e->dtype != AprCodeOf(t.dtype)) problems.push_back("tensor " + name + ": dtype code");
    if (e->shape != t.shape) problems.push_back("tensor " + name + ": shape");
    if (e->size != t.size) {
      problems.push_back("tensor " + name + ": size");
      continue;
    }
    uint64_t at = layout.data_offset + e->offset;
    if (at + e->size > bytes.size()) {
      problems.push_back("tensor " + name + " past the end of the file");
      continue;
    }
    std::string want = model.TensorBytes(name);
    if (bytes.compare(at, e->size, want) != 0) {
      uint64_t i = 0;
      while (i < e->size && bytes[at + i] == want[i]) ++i;
      problems.push_back("tensor " + name + " (" + std::to_string(e->size) +
                         " bytes at file offset " + std::to_string(at) +
                         ") differs from the source at byte " + std::to_string(i) +
                         " (file offset " + std::to_string(at + i) + ")");
    }
  }
  if (bytes.size() != data_end + 4) {
    problems.push_back("file size " + std::to_string(bytes.size()) + " != data end " +
                       std::to_string(data_end) + " + 4");
  } else {
    uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()),
                                               static_cast<uInt>(bytes.size() - 4)));
    if (static_cast<uint32_t>(Le(bytes, bytes.size() - 4, 4)) != crc) {
      problems.push_back("footer CRC32 mismatch");
    }
  }
  return problems;
}

uint64_t AprOffsetOf(const AprLayout& layout, const std::string& tensor, uint64_t within) {
  const AprEntry* e = layout.Find(tensor);
  if (!e) throw std::runtime_error("no tensor " + tensor + " in the mounted file");
  return layout.data_offset + e->offset + within;
}

// ----- chunk store and HF cache ---------------------------------------------------------------

uint64_t ChunkMap::ChunkLength(uint64_t chunk) const {
  return std::min<uint64_t>(chunk_size, size - chunk * chunk_size);
}

uint64_t ChunkMap::PresentBytes() const {
  uint64_t total = 0;
  for (size_t i = 0; i < present.size(); ++i) {
    if (present[i]) total += ChunkLength(i);
  }
  return total;
}

uint64_t ChunkMap::PresentCount() const {
  return static_cast<uint64_t>(std::count(present.begin(), present.end(), true));
}

ChunkMap ReadChunkMap(const std::string& store_dir) {
  ChunkMap map;
  std::string bytes = SlurpOrEmpty(store_dir + "/map");
  if (bytes.size() < 64) return map.error = "no map (or shorter than its header)", map;
  if (bytes.compare(0, 8, "APRFSCS1") != 0) return map.error = "bad map magic", map;
  map.size = Le(bytes, 8, 8);
  map.chunk_size = static_cast<uint32_t>(Le(bytes, 16, 4));
  map.flags = static_cast<uint32_t>(Le(bytes, 20, 4));
  uint64_t count = Le(bytes, 24, 8);
  if (map.chunk_size == 0 || count != (map.size + map.chunk_size - 1) / map.chunk_size ||
      bytes.size() < 64 + 8 * count) {
    return map.error = "inconsistent map header", map;
  }
  for (uint64_t i = 0; i < count; ++i) {
    map.words.push_back(static_cast<uint32_t>(Le(bytes, 64 + 4 * i, 4)));
    map.present.push_back((map.words.back() & 0x80000000u) != 0);
  }
  return map;
}

uint64_t PresentBytesInCache(const std::string& cache_dir) {
  uint64_t total = 0;
  for (const std::string& name : ListDir(cache_dir + "/chunks")) {
    ChunkMap map = ReadChunkMap(cache_dir + "/chunks/" + name);
    if (map.error.empty()) total += map.PresentBytes();
  }
  return total;
}

std::vector<std::string> CheckStoreAgainst(const std::string& store_dir,
                                           const std::string& source_file) {
  std::vector<std::string> problems;
  ChunkMap map = ReadChunkMap(store_dir);
  if (!map.error.empty()) return {store_dir + ": " + map.error};
  if (map.size != FileSize(source_file)) {
    problems.push_back(store_dir + ": map says size " + std::to_string(map.size) + ", source has " +
                       std::to_string(FileSize(source_file)));
    return problems;
  }
  Fd data(store_dir + "/data", O_RDONLY);
  Fd source(source_file, O_RDONLY);
  if (!data.ok() || !source.ok()) return {store_dir + ": cannot open data or source"};
  for (size_t chunk = 0; chunk < map.present.size(); ++chunk) {
    if (!map.present[chunk]) continue;
    uint64_t begin = chunk * map.chunk_size, length = map.ChunkLength(chunk);
    std::string got(length, '\0'), want(length, '\0');
    int64_t n = PreadFull(data.get(), got.data(), length, begin);
    PreadFull(source.get(), want.data(), length, begin);
    ChunkMap after = ReadChunkMap(store_dir);
    if (after.error.empty() && after.words[chunk] != map.words[chunk]) continue;
    if (n != static_cast<int64_t>(length)) {
      problems.push_back(store_dir + ": present chunk " + std::to_string(chunk) +
                         " cannot be read from data");
    } else if (got != want) {
      uint64_t i = 0;
      while (got[i] == want[i]) ++i;
      problems.push_back(store_dir + ": present chunk " + std::to_string(chunk) +
                         " differs from the source at file offset " + std::to_string(begin + i));
    }
  }
  return problems;
}

std::string RepoFolder(const std::string& repo_id) {
  std::string folder = "models--" + repo_id;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/')) {
    folder.replace(at, 1, "--");
  }
  return folder;
}

namespace {

bool SameContent(const std::string& a, const std::string& b, std::string* why) {
  Fd fa(a, O_RDONLY), fb(b, O_RDONLY);
  if (!fa.ok() || !fb.ok()) return *why = "cannot open", false;
  if (FileSize(a) != FileSize(b)) {
    *why = "size " + std::to_string(FileSize(a)) + " != " + std::to_string(FileSize(b));
    return false;
  }
  std::string x(1 << 20, '\0'), y(1 << 20, '\0');
  for (uint64_t at = 0;; at += x.size()) {
    int64_t n = PreadFull(fa.get(), x.data(), x.size(), at);
    int64_t m = PreadFull(fb.get(), y.data(), y.size(), at);
    if (n != m) return *why = "read error", false;
    if (n <= 0) return true;
    if (std::memcmp(x.data(), y.data(), static_cast<size_t>(n)) != 0) {
      *why = "bytes differ near offset " + std::to_string(at);
      return false;
    }
  }
}

}  // namespace

std::vector<std::string> CheckPublished(const std::string& hf_cache, const std::string& repo_id,
                                        const std::string& commit, const std::string& branch,
                                        const std::string& path, const std::string& sha256,
                                        const std::string& source_file) {
  std::vector<std::string> problems;
  const std::string repo = hf_cache + "/" + RepoFolder(repo_id);
  const std::string blob = repo + "/blobs/" + sha256;
  struct stat st;
  if (lstat(blob.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    problems.push_back(blob + ": not a regular file");
  } else {
    std::string why;
    if (!SameContent(blob, source_file, &why)) problems.push_back(blob + ": content: " + why);
  }
  const std::string link = repo + "/snapshots/" + commit + "/" + path;
  if (lstat(link.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
    problems.push_back(link + ": not a symlink");
  } else {
    std::error_code ec;
    std::string target = fs::read_symlink(link, ec).string();
    std::string want = "../../blobs/" + sha256;
    for (size_t i = 0; i < static_cast<size_t>(std::count(path.begin(), path.end(), '/')); ++i) {
      want = "../" + want;
    }
    if (target != want) problems.push_back(link + " -> " + target + " (expected " + want + ")");
    if (fs::weakly_canonical(link, ec) != fs::weakly_canonical(blob, ec)) {
      problems.push_back(link + " does not resolve to the blob");
    }
  }
  std::string ref = SlurpOrEmpty(repo + "/refs/" + branch);
  if (ref != commit) {
    problems.push_back(repo + "/refs/" + branch + " holds [" + ref + "], expected [" + commit +
                       "] without a newline");
  }
  for (const std::string& name : ListDir(repo + "/blobs")) {
    if (name.find(".incomplete") != std::string::npos) {
      problems.push_back("leftover " + repo + "/blobs/" + name);
    }
  }
  return problems;
}

void SeedHfCache(const std::string& hf_cache, const std::string& repo_id, const std::string& commit,
                 const SourceModel& model, const std::vector<std::string>& files) {
  const std::string repo = hf_cache + "/" + RepoFolder(repo_id);
  fs::create_directories(repo + "/blobs");
  fs::create_directories(repo + "/snapshots/" + commit);
  fs::create_directories(repo + "/refs");
  for (const std::string& file : files) {
    std::string sha = Sha256OfFile(model.dir + "/" + file);
    if (sha.empty()) throw std::runtime_error("sha256sum failed for " + file);
    fs::copy_file(model.dir + "/" + file, repo + "/blobs/" + sha,
                  fs::copy_options::overwrite_existing);
    fs::create_symlink("../../blobs/" + sha, repo + "/snapshots/" + commit + "/" + file);
  }
  std::ofstream(repo + "/refs/main", std::ios::trunc) << commit;
}

// ----- access logs ----------------------------------------------------------------------------

std::vector<AccessLine> ReadAccessLog(const std::string& path) {
  static const std::regex line_re(
      R"re(^\S+ \[[^\]]*\] "(\S+) (\S+)[^"]*" (\d+) (\d+) range="([^"]*)" conn=(\d+) req=(\d+) rt=[\d.]+(?: auth="([^"]*)")?(?: ifr="([^"]*)")?)re");
  static const std::regex range_re(R"(^bytes=(\d+)-(\d+)$)");
  static const std::regex sha_re(R"(/xet-bridge/([0-9a-f]{64}))");
  std::vector<AccessLine> lines;
  std::istringstream in(SlurpOrEmpty(path));
  std::string text;
  while (std::getline(in, text)) {
    std::smatch m;
    if (!std::regex_search(text, m, line_re)) continue;
    AccessLine line;
    line.raw = text;
    line.method = m[1];
    line.path = m[2];
    line.status = std::stoi(m[3]);
    line.bytes = std::stoull(m[4]);
    line.range = m[5];
    line.conn = std::stoull(m[6]);
    line.req = std::stoull(m[7]);
    line.auth_logged = m[8].matched;
    line.auth = m[8];
    // nginx writes the If-Range's double quotes as \x22, and an absent header as "-".
    line.if_range = std::regex_replace(m[9].str(), std::regex(R"(\\x22)"), "\"");
    if (line.if_range == "-") line.if_range.clear();
    std::smatch r;
    if (std::regex_match(line.range, r, range_re)) {
      line.has_range = true;
      line.first = std::stoull(r[1]);
      line.last = std::stoull(r[2]);
    }
    std::smatch s;
    if (std::regex_search(line.path, s, sha_re)) line.sha = s[1];
    lines.push_back(std::move(line));
  }
  return lines;
}

// ----- HubFixture -----------------------------------------------------------------------------

HubFixture::~HubFixture() { Stop(); }

bool HubFixture::Start(const std::string& state_dir, const std::vector<std::string>& args,
                       std::string* error) {
  state_dir_ = state_dir;
  std::vector<std::string> argv = {"python3", ToolsDir() + "/hub_fixture.py", "start", state_dir};
  argv.insert(argv.end(), args.begin(), args.end());
  if (std::find(args.begin(), args.end(), "--hash-cache") == args.end()) {
    argv.insert(argv.end(), {"--hash-cache", ModelsRoot() + "/hash-cache.json"});
  }
  running_ = true;  // so that Stop() runs `stop` whatever happened
  ProcResult r = RunCommand(argv, 120s);
  if (r.exit_code != 0) {
    *error = "hub_fixture.py start: " + r.Describe();
    return false;
  }
  info_ = json::parse(r.out, nullptr, false);
  if (info_.is_discarded() || !info_.contains("endpoint")) {
    *error = "hub_fixture.py start printed no JSON: " + r.out;
    return false;
  }
  for (pid_t pid : pids()) crash_slots_.push_back(RegisterCrash(-pid, ""));  // session leaders
  return true;
}

void HubFixture::Stop() {
  if (!running_) return;
  running_ = false;
  ProcResult r = RunCommand({"python3", ToolsDir() + "/hub_fixture.py", "stop", state_dir_}, 60s);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "hub_fixture.py stop %s: %s\n", state_dir_.c_str(), r.Describe().c_str());
    for (pid_t pid : pids()) kill(-pid, SIGKILL);
  }
  for (int slot : crash_slots_) UnregisterCrash(slot);
  crash_slots_.clear();
}

bool HubFixture::Refresh(std::string* error) {
  ProcResult r =
      RunCommand({"python3", ToolsDir() + "/hub_fixture.py", "refresh", state_dir_}, 60s);
  if (r.exit_code != 0) {
    *error = "hub_fixture.py refresh: " + r.Describe();
    return false;
  }
  json info = json::parse(r.out, nullptr, false);
  if (!info.is_discarded()) info_ = info;
  return true;
}

bool HubFixture::EnableAuthLogging(std::string* error) {
  const std::string conf = state_dir_ + "/cdn/nginx.conf";
  std::string text = SlurpOrEmpty(conf);
  const std::string from = "rt=$request_time ";
  size_t at = text.find(from);
  if (at == std::string::npos) {
    *error = "no log_format to extend in " + conf;
    return false;
  }
  text.replace(at, from.size(), "rt=$request_time auth=\"$http_authorization\" ");
  WriteText(conf, text);
  pid_t pid = info_["pids"].value("cdn", -1);
  if (pid <= 0 || kill(pid, SIGHUP) != 0) {
    *error = "cannot signal the CDN nginx";
    return false;
  }
  // The reload is live once a probe's header shows up in the log.
  for (int i = 0; i < 100; ++i) {
    std::string probe = "Bearer aprfs-probe-" + std::to_string(i);
    Curl({"-o", "/dev/null", "-H", "Authorization: " + probe, cdn() + "/_fixture/generation"});
    for (const AccessLine& line : CdnLog()) {
      if (line.auth_logged && line.auth == probe) return true;
    }
    std::this_thread::sleep_for(100ms);
  }
  *error = "the CDN nginx did not log Authorization after the reload";
  return false;
}

std::string HubFixture::Commit(const std::string& repo) const {
  return info_.at("repos").at(repo).at("commit").get<std::string>();
}

std::string HubFixture::Sha(const std::string& repo, const std::string& path) const {
  return info_.at("repos").at(repo).at("files").at(path).at("sha256").get<std::string>();
}

std::vector<AccessLine> HubFixture::CdnLog() const {
  return ReadAccessLog(state_dir_ + "/cdn/access.log");
}
std::vector<AccessLine> HubFixture::HubLog() const {
  return ReadAccessLog(state_dir_ + "/hub/access.log");
}

std::vector<pid_t> HubFixture::pids() const {
  std::vector<pid_t> out;
  if (info_.contains("pids")) {
    for (const char* name : {"hub", "cdn"}) {
      pid_t pid = info_["pids"].value(name, -1);
      if (pid > 0) out.push_back(pid);
    }
  }
  return out;
}

// ----- FaultServer ----------------------------------------------------------------------------

FaultServer::~FaultServer() { Stop(); }

bool FaultServer::Start(const std::string& file, const std::vector<std::string>& args,
                        const std::string& work_dir, std::string* error) {
  const std::string ready = work_dir + "/fault-ready.json";
  out_path_ = work_dir + "/fault-server.out";
  std::vector<std::string> argv = {"python3", ToolsDir() + "/fault_server.py", file, "--ready-file",
                                   ready};
  argv.insert(argv.end(), args.begin(), args.end());
  int fd = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return *error = "cannot create " + out_path_, false;
  Spawned spawned = SpawnProcess(argv, {}, fd, fd);
  ::close(fd);
  if (spawned.pid < 0) return *error = spawned.error, false;
  pid_ = spawned.pid;
  crash_slot_ = RegisterCrash(-pid_, "");
  auto deadline = Clock::now() + 15s;
  while (Clock::now() < deadline) {
    if (PathExists(ready)) {
      info_ = json::parse(SlurpOrEmpty(ready), nullptr, false);
      if (!info_.is_discarded() && info_.contains("endpoint")) return true;
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *error = "fault_server.py exited: " + Output();
      return false;
    }
    std::this_thread::sleep_for(20ms);
  }
  *error = "fault_server.py was not ready within 15 s: " + Output();
  return false;
}

void FaultServer::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  ProcResult r;
  WaitWithDeadline(pid_, 10s, &r, true);
  pid_ = -1;
  UnregisterCrash(crash_slot_);
  crash_slot_ = -1;
}

std::string FaultServer::control() const {
  std::string u = url();
  return u.substr(0, u.rfind('/'));
}

bool FaultServer::Plan(const std::string& plan_json, std::string* error) {
  ProcResult r =
      Curl({"-f", "-o", "/dev/null", "-X", "POST", "--data", plan_json, control() + "/_plan"});
  if (r.exit_code != 0 && error) *error = "POST /_plan " + plan_json + ": " + r.Describe();
  return r.exit_code == 0;
}

bool FaultServer::Reset() {
  return Curl({"-f", "-o", "/dev/null", "-X", "POST", control() + "/_reset"}).exit_code == 0;
}

json FaultServer::Stats() {
  ProcResult r = Curl({"-f", control() + "/_stats"});
  json stats = json::parse(r.out, nullptr, false);
  return stats.is_discarded() ? json::object() : stats;
}

std::string FaultServer::Output() const { return Trim(SlurpOrEmpty(out_path_), 4000); }

// ----- AprfsMount -----------------------------------------------------------------------------

namespace {

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

// fstype of the visible mount at `mountpoint`, or "" when nothing is mounted there.
std::string MountType(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, found;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, field;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> field && field != "-") {
    }
    std::string fstype;
    fields >> fstype;
    if (Unescape(point) == mountpoint) found = fstype;
  }
  return found;
}

namespace {

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x4000U  // Linux 6.8
#endif

// The mount on top at `path`: its id that is never reused (mountinfo's ids are, at once), or 0.
// From cached attributes: a dead FUSE mount answers too.
uint64_t UniqueMountId(const std::string& path) {
  struct statx st;
  if (statx(AT_FDCWD, path.c_str(), AT_STATX_DONT_SYNC, STATX_MNT_ID_UNIQUE, &st) != 0) return 0;
  return (st.stx_mask & STATX_MNT_ID_UNIQUE) ? st.stx_mnt_id : 0;
}

}  // namespace

std::vector<std::string> MountsUnder(const std::string& root) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, mroot, point;
    fields >> id >> parent >> device >> mroot >> point;
    point = Unescape(point);
    if (!root.empty() && point.rfind(root + "/", 0) == 0) out.push_back(point);
  }
  return out;
}

std::map<const AprfsMount*, int> g_mount_slots;
std::mutex g_mount_slots_mu;

}  // namespace

bool IsAprfsMounted(const std::string& mountpoint) { return MountType(mountpoint) == "fuse.aprfs"; }

AprfsMount::~AprfsMount() { Stop(); }

bool AprfsMount::Start(const std::vector<std::string>& args, const std::vector<std::string>& env,
                       std::string* error) {
  std::vector<std::string> argv = {AprfsBinary(), "mount", mountpoint_, "-f"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--log-file", log_file_, "--log-level", "debug"});
  const std::string out = log_file_ + ".out";
  int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return *error = "cannot create " + out, false;
  // A dead mount left there (that the daemon replaces) is of the same type, and statfs() of it
  // answered 0 once (two kill tests at once): the mount to wait for is another one.
  const uint64_t dead_mount = UniqueMountId(mountpoint_);
  Spawned spawned = SpawnProcess(argv, env, fd, fd);
  ::close(fd);
  if (spawned.pid < 0) return *error = spawned.error, false;
  pid_ = spawned.pid;
  reaped_ = false;
  {
    std::lock_guard lock(g_mount_slots_mu);
    g_mount_slots[this] = RegisterCrash(pid_, mountpoint_);
  }
  auto deadline = Clock::now() + 20s;
  // Mounted (a new mount) and answering. statfs(), not stat(): the kernel answers stat() of a
  // dead mount's root from its attribute cache for a while.
  struct statfs fs_info;
  for (;;) {
    const bool new_mount = dead_mount == 0 || UniqueMountId(mountpoint_) != dead_mount;
    if (IsAprfsMounted(mountpoint_) && new_mount && statfs(mountpoint_.c_str(), &fs_info) == 0) {
      break;
    }
    if (!Alive()) {
      *error = "the daemon exited (status " + std::to_string(status_) + ") before " + mountpoint_ +
               " was mounted\n" + Log();
      return false;
    }
    if (Clock::now() > deadline) {
      *error = "timed out after 20 s waiting for " + mountpoint_ + " to be mounted\n" + Log();
      return false;
    }
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

bool AprfsMount::Alive() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = status;
    return false;
  }
  return r == 0;
}

void AprfsMount::Kill() {
  killed_ = true;
  if (pid_ > 0 && !reaped_) kill(pid_, SIGKILL);
}

void AprfsMount::Stop(std::vector<std::string>* problems) {
  auto problem = [&](const std::string& text) {
    if (problems) problems->push_back(text);
  };
  if (!MountType(mountpoint_).empty()) {
    auto deadline = Clock::now() + 5s;
    while (umount2(mountpoint_.c_str(), 0) != 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);  // EBUSY: a reader of ours is still finishing
    }
    if (!MountType(mountpoint_).empty()) {
      problem("could not unmount " + mountpoint_ + "; detached lazily");
      umount2(mountpoint_.c_str(), MNT_DETACH);
    }
  }
  if (pid_ > 0 && !reaped_) {
    ProcResult r;
    WaitWithDeadline(pid_, 15s, &r, true);
    if (r.timed_out)
      problem("the daemon of " + mountpoint_ + " did not exit within 15 s of the unmount (killed)");
    if (r.signal && !r.timed_out && !killed_) {
      problem("the daemon of " + mountpoint_ + " died of signal " + std::to_string(r.signal));
    }
    reaped_ = true;
  }
  std::lock_guard lock(g_mount_slots_mu);
  auto it = g_mount_slots.find(this);
  if (it != g_mount_slots.end()) {
    UnregisterCrash(it->second);
    g_mount_slots.erase(it);
  }
}

std::string AprfsMount::LogText() const { return SlurpOrEmpty(log_file_); }

std::string AprfsMount::Log() const {
  return "--- daemon log (" + log_file_ + ") ---\n" + Trim(SlurpOrEmpty(log_file_), 12000) +
         "\n--- daemon stdout/stderr ---\n" + Trim(SlurpOrEmpty(log_file_ + ".out"), 3000);
}

// ----- RemoteTest -----------------------------------------------------------------------------

void RemoteTest::SetUp() {
  InstallCrashHandlers();
  std::string pattern = (fs::temp_directory_path() / "aprfs-rtest-XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
  root_ = pattern;
  StartWatchdog(90s);
}

std::string RemoteTest::Dir(const std::string& name) {
  std::string dir = root_ + "/" + name;
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> RemoteTest::Env(const std::string& endpoint,
                                         const std::vector<std::string>& extra) const {
  std::vector<std::string> env = {"HF_ENDPOINT=" + endpoint};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

HubFixture& RemoteTest::StartHub(const std::string& name, const std::vector<std::string>& args) {
  hubs_.push_back(std::make_unique<HubFixture>());
  HubFixture& hub = *hubs_.back();
  std::string error;
  if (!hub.Start(root_ + "/" + name, args, &error)) {
    ADD_FAILURE() << error;
    throw std::runtime_error("the hub fixture did not start");
  }
  return hub;
}

FaultServer& RemoteTest::StartFault(const std::string& name, const std::string& file,
                                    const std::vector<std::string>& args) {
  faults_.push_back(std::make_unique<FaultServer>());
  FaultServer& server = *faults_.back();
  std::string error;
  if (!server.Start(file, args, Dir(name), &error)) {
    ADD_FAILURE() << error;
    throw std::runtime_error("the fault server did not start");
  }
  return server;
}

AprfsMount* RemoteTest::Mount(const std::string& name, const std::vector<std::string>& args,
                              const std::vector<std::string>& env) {
  // Not Dir(): on a dead mount (kill -9) stat fails with ENOTCONN once the kernel's attribute
  // cache expires, and replacing that dead mount is exactly what the daemon must do.
  const std::string mountpoint = root_ + "/" + name;
  std::error_code ignored;
  fs::create_directories(mountpoint, ignored);
  AprfsMount* mount;
  {
    std::lock_guard lock(mounts_mu_);
    mounts_.push_back(std::make_unique<AprfsMount>(mountpoint, root_ + "/" + name + ".log"));
    mount = mounts_.back().get();
  }
  std::string error;
  if (!mount->Start(args, env, &error)) {
    ADD_FAILURE() << "mount at " << mountpoint << ": " << error;
    return nullptr;
  }
  return mount;
}

void RemoteTest::Unmount(AprfsMount* mount) {
  if (!mount) return;
  std::vector<std::string> problems;
  mount->Stop(&problems);
  for (const std::string& p : problems) ADD_FAILURE() << p << "\n" << mount->Log();
}

std::string RemoteTest::SmallFilesystem(const std::string& name, uint64_t bytes) {
  const std::string point = Dir(name);
  const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
  if (mount("tmpfs", point.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    ADD_FAILURE() << "cannot mount a tmpfs at " << point << ": " << std::strerror(errno);
    throw std::runtime_error("no scratch filesystem");
  }
  filesystems_.emplace_back(point, RegisterCrash(-1, point));
  return point;
}

void RemoteTest::StartWatchdog(std::chrono::seconds budget) {
  {
    std::lock_guard lock(watchdog_mu_);
    watchdog_deadline_ = Clock::now() + budget;
    watchdog_stop_ = false;
  }
  watchdog_ = std::thread([this] {
    std::unique_lock lock(watchdog_mu_);
    while (!watchdog_stop_) {
      if (watchdog_cv_.wait_until(lock, watchdog_deadline_) == std::cv_status::timeout &&
          Clock::now() >= watchdog_deadline_ && !watchdog_stop_) {
        watchdog_fired_ = true;
        std::fprintf(stderr,
                     "WATCHDOG: the test exceeded its time budget; killing daemons, "
                     "servers and commands so that blocked calls return\n");
        {
          std::lock_guard mounts(mounts_mu_);
          for (auto& mount : mounts_) mount->Kill();
        }
        for (auto& fault : faults_) {
          if (fault->pid() > 0) kill(fault->pid(), SIGKILL);
        }
        std::lock_guard active(g_active_mu);
        for (pid_t group : g_active_groups) kill(-group, SIGKILL);
        watchdog_deadline_ = Clock::now() + 5s;  // keep killing
      }
    }
  });
}

void RemoteTest::SetWatchdog(std::chrono::seconds budget) {
  std::lock_guard lock(watchdog_mu_);
  watchdog_deadline_ = Clock::now() + budget;
  watchdog_cv_.notify_all();
}

void RemoteTest::StopWatchdog() {
  {
    std::lock_guard lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void RemoteTest::TearDown() {
  std::vector<std::string> problems;
  std::vector<AprfsMount*> all;
  {
    std::lock_guard lock(mounts_mu_);
    for (auto& mount : mounts_) all.push_back(mount.get());
  }
  for (AprfsMount* mount : all) {
    std::vector<std::string> mine;
    mount->Stop(&mine);
    problems.insert(problems.end(), mine.begin(), mine.end());
  }
  for (auto& fault : faults_) fault->Stop();
  for (auto& hub : hubs_) hub->Stop();
  // After the daemons: they hold files there.
  for (const auto& [point, slot] : filesystems_) {
    if (umount2(point.c_str(), 0) != 0) {
      problems.push_back("cannot unmount " + point + ": " + std::strerror(errno) + " (detached)");
      umount2(point.c_str(), MNT_DETACH);
    }
    UnregisterCrash(slot);
  }
  filesystems_.clear();
  StopWatchdog();
  if (watchdog_fired_) problems.push_back("the watchdog fired: the test ran out of time");

  for (const std::string& point : MountsUnder(root_)) {
    umount2(point.c_str(), MNT_DETACH);
    problems.push_back("left mounted: " + point + " (detached)");
  }
  if (HasFailure() || !problems.empty()) {
    for (AprfsMount* mount : all) std::fprintf(stderr, "%s\n", mount->Log().c_str());
    for (auto& fault : faults_) {
      std::fprintf(stderr, "--- fault server output ---\n%s\n", fault->Output().c_str());
    }
  }
  {
    std::lock_guard lock(mounts_mu_);
    mounts_.clear();
  }
  faults_.clear();
  hubs_.clear();
  if (MountsUnder(root_).empty() && !root_.empty() && !std::getenv("APRFS_KEEP_TEST_DIRS")) {
    std::error_code ec;
    fs::remove_all(root_, ec);
  } else if (!root_.empty()) {
    std::fprintf(stderr, "scratch folder kept: %s\n", root_.c_str());
  }
  for (const std::string& p : problems) ADD_FAILURE() << "teardown: " << p;
}

bool WaitFor(const std::function<bool()>& done, Millis timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() > deadline) return done();
    std::this_thread::sleep_for(20ms);
  }
}

bool WaitUntilEveryShardPublished(const std::string& hf_cache, const HubFixture& hub,
                                  const std::string& repo, const SourceModel& model,
                                  Millis timeout) {
  const std::string commit = hub.Commit(repo);
  return WaitFor(
      [&] {
        for (const std::string& shard : model.shards) {
          if (!CheckPublished(hf_cache, repo, commit, "main", shard, hub.Sha(repo, shard),
                              model.ShardPath(shard))
                   .empty()) {
            return false;
          }
        }
        return true;
      },
      timeout);
}

std::string Join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

}  // namespace aprfs_rtest
