#pragma once

// Shared machinery of the remote (issue 3) tests: real servers on loopback play the Hugging Face
// Hub and its CDN, and the aprfs binary mounts `--repo` models from them.
//
//  * HubFixture   — tests/tools/hub_fixture.py: two real nginx processes (hub + CDN), with
//                   their access logs (range="..." conn=N req=M) parsed for assertions.
//  * FaultServer  — tests/tools/fault_server.py: hub + data server for one file that misbehaves
//                   on purpose following a plan; /_stats for assertions.
//  * AprfsMount   — `aprfs mount MOUNTPOINT -f ...` with a clean environment (HF_ENDPOINT etc.
//                   set by the test only), waited for in /proc/self/mountinfo.
//  * RemoteTest   — the gtest fixture: a scratch folder, a watchdog, and a TearDown that unmounts,
//                   reaps the daemons and stops every server even when the test failed.
//
// Safety rules: every wait has a deadline; the watchdog SIGKILLs the daemons (which aborts the
// FUSE connections, so no syscall of the test stays blocked) and the running commands when a
// test runs far past its budget; a crash handler detaches mounts and kills daemons and servers
// if the test binary dies. (Ideas copied from tests/integration/mount_fixture.*.)

#include <gtest/gtest.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/filesystem_fill.h"

namespace aprfs_rtest {

using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr uint64_t kChunk = 8ull << 20;     // the chunk store's chunk size
constexpr uint64_t kHeaderRead = 64 << 10;  // the first header range a client asks for

// ----- processes ------------------------------------------------------------------------------

struct ProcResult {
  int exit_code = -1;  // -1 when killed by a signal, timed out or not started
  int signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
  double seconds = 0;
  std::string Describe() const;
};

// The environment every command and daemon gets: ours minus every variable the Hub client or
// the config lookup would read (HF_*, HUGGING_FACE_*, XDG_*...), plus `extra` ("NAME=value").
std::vector<std::string> CleanEnvironment(const std::vector<std::string>& extra);

// Runs argv with stdin /dev/null, stdout/stderr captured through temporary files, in its own
// process group (killed on timeout), with CleanEnvironment(env).
ProcResult RunCommand(const std::vector<std::string>& argv, Millis timeout,
                      const std::vector<std::string>& env = {});
ProcResult RunAprfs(const std::vector<std::string>& args, const std::vector<std::string>& env,
                    Millis timeout = 60s);
// python3 aprcheck.py FILE --source DIR extra...
ProcResult RunAprcheck(const std::string& file, const std::string& source_dir,
                       const std::vector<std::string>& extra = {}, Millis timeout = 90s);
// curl, for the fault server's control routes and probes.
ProcResult Curl(const std::vector<std::string>& args, Millis timeout = 15s);

std::string AprfsBinary();
std::string ToolsDir();

bool ProcessAlive(pid_t pid);

// ----- files ----------------------------------------------------------------------------------

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const std::string& path, int flags);
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// pread until `length` bytes or EOF; the byte count, or -errno.
int64_t PreadFull(int fd, char* dst, uint64_t length, uint64_t offset);
// The whole file through read(2) (1 MiB pieces); false with *error on failure or short read.
bool ReadWholeFile(const std::string& path, std::string* out, std::string* error);
// [offset, offset+length) with O_DIRECT (the daemon sees exactly this read, no readahead; falls
// back to a buffered read after dropping the page cache if O_DIRECT is refused). Returns 0 or
// the errno of the failure; *seconds is how long the read took.
int ReadRange(const std::string& path, uint64_t offset, uint64_t length, std::string* out,
              double* seconds = nullptr);
std::string SlurpOrEmpty(const std::string& path);
void WriteText(const std::string& path, const std::string& text);
std::vector<std::string> ListDir(const std::string& dir);
void DropPageCache(const std::string& path);
bool PathExists(const std::string& path);  // lstat
uint64_t FileSize(const std::string& path);
using aprfs::testing::FillFilesystem;
using aprfs::testing::FreeBytes;

// ----- models ---------------------------------------------------------------------------------

// One tensor of a source model: where its bytes are in which shard, and the bytes.
struct SourceTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::string shard;          // file name in the model folder
  uint64_t shard_offset = 0;  // absolute offset of its first byte in the shard file
  uint64_t size = 0;
};

// A model folder on disk, parsed independently of product code (safetensors headers by hand).
struct SourceModel {
  std::string dir;
  std::vector<std::string> shards;              // *.safetensors, sorted
  std::map<std::string, SourceTensor> tensors;  // by name
  uint64_t ShardSize(const std::string& shard) const;
  std::string ShardPath(const std::string& shard) const { return dir + "/" + shard; }
  // The bytes of one tensor, read from its shard file.
  std::string TensorBytes(const std::string& name) const;
};
SourceModel ParseSourceModel(const std::string& dir);

// Models shared by the tests of this process (created once, read-only, deleted at exit):
//  tiny:  make_model.py --preset tiny (2 shards of ~90 KB: one chunk each);
//  big:   C++ writer, 3 shards of ~20 MB (2 full chunks + a partial one each), tensors
//         blk.K.norm (F32, odd size) and blk.K.weight (U8, ~20 MB) per shard K;
//  single: C++ writer, one model.safetensors of ~20 MB (3 chunks), for the fault server.
const SourceModel& TinyModel();
const SourceModel& BigModel();
const SourceModel& SingleModel();
//  large_single: one model.safetensors of ~80 MB (10 chunks), for throughput and priorities.
const SourceModel& LargeSingleModel();
// A private copy of a model folder (for tests that must modify a file).
SourceModel CopyModel(const SourceModel& model, const std::string& dir);

// sha256 of a file, by `sha256sum` (independent of product code).
std::string Sha256OfFile(const std::string& path);

// ----- APR ------------------------------------------------------------------------------------

struct AprEntry {
  std::string name;
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // relative to data_offset
  uint64_t size = 0;
};

struct AprLayout {
  std::string error;
  uint64_t file_size = 0;
  uint64_t data_offset = 0;
  std::vector<AprEntry> entries;
  const AprEntry* Find(const std::string& name) const;
};

// Independent parse of an APR v2 header and index (apr-v2-format.md §3, §5.1).
AprLayout ParseAprBytes(const std::string& bytes);
AprLayout ParseAprFile(const std::string& path);
int AprCodeOf(const std::string& safetensors_dtype);

// Every problem of a whole .apr file's bytes against the source model: index (names, dtypes,
// shapes, sizes), every tensor's bytes, size (data end + 4) and footer CRC. Empty when right.
std::vector<std::string> CheckAprBytes(const std::string& bytes, const SourceModel& model);
// Where a source tensor's byte `within` lives in the mounted file.
uint64_t AprOffsetOf(const AprLayout& layout, const std::string& tensor, uint64_t within = 0);

// ----- chunk store and HF cache ---------------------------------------------------------------

// <store>/map: "APRFSCS1", u64 size, u32 chunk size, u32 flags, u64 chunk count; u32 per chunk
// (bit 31 = present); u32 last access per chunk.
struct ChunkMap {
  std::string error;  // non-empty when unreadable or malformed
  uint64_t size = 0;
  uint32_t chunk_size = 0;
  uint32_t flags = 0;
  std::vector<bool> present;
  std::vector<uint32_t> words;  // each chunk's state word: present bit and generation
  uint64_t PresentBytes() const;
  uint64_t PresentCount() const;
  uint64_t ChunkLength(uint64_t chunk) const;
};
ChunkMap ReadChunkMap(const std::string& store_dir);
// Sum of present chunk lengths over every store under <cache-dir>/chunks.
uint64_t PresentBytesInCache(const std::string& cache_dir);
// Every present chunk of the store's data file equals the same bytes of `source_file`;
// problems otherwise ("chunk 2 differs at byte ..."). A chunk whose state word changed while
// its bytes were read (the daemon evicted or fetched it meanwhile) is skipped, as the daemon's
// own readers would retry it.
std::vector<std::string> CheckStoreAgainst(const std::string& store_dir,
                                           const std::string& source_file);

std::string RepoFolder(const std::string& repo_id);  // "models--ORG--NAME"

// The official HF cache layout of one published file: blobs/<sha256> with the source's bytes,
// snapshots/<commit>/<path> a relative symlink to it, refs/<branch> = commit without newline,
// no leftover *.incomplete. Problems, or empty.
std::vector<std::string> CheckPublished(const std::string& hf_cache, const std::string& repo_id,
                                        const std::string& commit, const std::string& branch,
                                        const std::string& path, const std::string& sha256,
                                        const std::string& source_file);
// Copies files of a model into an HF cache in the official layout (blobs by sha256, relative
// snapshot symlinks, refs/main), as huggingface_hub would have left them.
void SeedHfCache(const std::string& hf_cache, const std::string& repo_id, const std::string& commit,
                 const SourceModel& model, const std::vector<std::string>& files);

// ----- servers --------------------------------------------------------------------------------

// One line of an nginx access log of the fixture.
struct AccessLine {
  std::string method, path, sha;  // sha: the 64-hex blob of a CDN URL
  int status = 0;
  uint64_t bytes = 0;
  std::string range;  // "bytes=a-b" or "-"
  bool has_range = false;
  uint64_t first = 0, last = 0;
  uint64_t conn = 0, req = 0;
  std::string auth;  // only once EnableAuthLogging() was called; "-" when absent
  bool auth_logged = false;
  std::string if_range;  // the If-Range header the client sent; empty when none
  std::string raw;
};
std::vector<AccessLine> ReadAccessLog(const std::string& path);

class HubFixture {
 public:
  HubFixture() = default;
  ~HubFixture();
  // hub_fixture.py start STATE_DIR args...; false (with *error) on failure.
  bool Start(const std::string& state_dir, const std::vector<std::string>& args,
             std::string* error);
  // hub_fixture.py stop; safe to call twice.
  void Stop();
  bool Refresh(std::string* error);
  // Adds auth="$http_authorization" to the CDN's log format and reloads it (checked with a
  // probe request that carries a header). For "the token never goes to the CDN".
  bool EnableAuthLogging(std::string* error);

  bool running() const { return running_; }
  const json& info() const { return info_; }
  std::string endpoint() const { return info_.value("endpoint", ""); }
  std::string cdn() const { return info_.value("cdn", ""); }
  std::string Commit(const std::string& repo) const;
  std::string Sha(const std::string& repo, const std::string& path) const;
  std::string state_dir() const { return state_dir_; }
  std::vector<AccessLine> CdnLog() const;
  std::vector<AccessLine> HubLog() const;
  std::vector<pid_t> pids() const;

 private:
  std::string state_dir_;
  json info_;
  bool running_ = false;
  std::vector<int> crash_slots_;
};

class FaultServer {
 public:
  FaultServer() = default;
  ~FaultServer();
  // python3 fault_server.py FILE args... --ready-file ...; waits up to 15 s for it.
  bool Start(const std::string& file, const std::vector<std::string>& args,
             const std::string& work_dir, std::string* error);
  void Stop();
  // POST /_plan with `plan_json` (list or object); POST /_reset; GET /_stats.
  bool Plan(const std::string& plan_json, std::string* error = nullptr);
  bool Reset();
  json Stats();

  pid_t pid() const { return pid_; }
  const json& info() const { return info_; }
  std::string endpoint() const { return info_.value("endpoint", ""); }
  std::string url() const { return info_.value("url", ""); }
  std::string control() const;  // http://127.0.0.1:DATAPORT
  std::string repo() const { return info_.value("repo", ""); }
  std::string path() const { return info_.value("path", ""); }
  std::string commit() const { return info_.value("commit", ""); }
  std::string sha256() const { return info_.value("sha256", ""); }
  std::string Output() const;  // its stdout/stderr

 private:
  pid_t pid_ = -1;
  json info_;
  std::string out_path_;
  int crash_slot_ = -1;
};

// One `aprfs mount MOUNTPOINT -f ARGS --log-file LOG --log-level debug` daemon.
class AprfsMount {
 public:
  AprfsMount(std::string mountpoint, std::string log_file)
      : mountpoint_(std::move(mountpoint)), log_file_(std::move(log_file)) {}
  ~AprfsMount();
  // Starts the daemon and waits (20 s) until the mountpoint is a fuse.aprfs mount. False with
  // *error (including the daemon's log) otherwise.
  bool Start(const std::vector<std::string>& args, const std::vector<std::string>& env,
             std::string* error);
  // Unmounts, waits (15 s) for the daemon to exit, kills it otherwise. Problems are appended.
  void Stop(std::vector<std::string>* problems = nullptr);
  void Kill();  // SIGKILL (a test's crash, or the watchdog): its death is then no problem

  const std::string& mountpoint() const { return mountpoint_; }
  std::string Path(const std::string& relative) const { return mountpoint_ + "/" + relative; }
  pid_t pid() const { return pid_; }
  bool Alive();
  std::string Log() const;      // for failure messages (trimmed)
  std::string LogText() const;  // the whole log file

 private:
  std::string mountpoint_, log_file_;
  pid_t pid_ = -1;
  bool reaped_ = true;
  bool killed_ = false;
  int status_ = 0;
};

bool IsAprfsMounted(const std::string& mountpoint);

// ----- the fixture ----------------------------------------------------------------------------

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  const std::string& root() const { return root_; }
  // A new folder root()/name (created).
  std::string Dir(const std::string& name);
  // The environment for aprfs: HF_ENDPOINT and whatever else the test adds.
  std::vector<std::string> Env(const std::string& endpoint,
                               const std::vector<std::string>& extra = {}) const;

  // Starts hub_fixture.py with its state in root()/name; fatal failure if it does not start.
  HubFixture& StartHub(const std::string& name, const std::vector<std::string>& args);
  FaultServer& StartFault(const std::string& name, const std::string& file,
                          const std::vector<std::string>& args);
  // Mounts at root()/name (created) with `args` and `env`; nullptr (with a gtest failure) when
  // the mount does not come up.
  AprfsMount* Mount(const std::string& name, const std::vector<std::string>& args,
                    const std::vector<std::string>& env);
  // Unmounts one mount now (checks the daemon exits).
  void Unmount(AprfsMount* mount);

  // The per-test time budget: past it the watchdog kills daemons and commands.
  void SetWatchdog(std::chrono::seconds budget);

  // A tmpfs of `bytes` at root()/name, for "the disk is full" tests: unmounted in TearDown once
  // the daemons are gone (lazily detached if the test binary dies). Fatal failure if it cannot
  // be mounted.
  std::string SmallFilesystem(const std::string& name, uint64_t bytes);

 private:
  void StartWatchdog(std::chrono::seconds budget);
  void StopWatchdog();

  std::string root_;
  std::vector<std::unique_ptr<HubFixture>> hubs_;
  std::vector<std::unique_ptr<FaultServer>> faults_;
  std::vector<std::unique_ptr<AprfsMount>> mounts_;
  std::mutex mounts_mu_;
  std::vector<std::pair<std::string, int>> filesystems_;  // mountpoint, crash slot

  std::thread watchdog_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  Clock::time_point watchdog_deadline_;
  bool watchdog_stop_ = false;
  std::atomic<bool> watchdog_fired_{false};
};

// Polls `done` every 20 ms until it returns true or `timeout` passes; its last value.
bool WaitFor(const std::function<bool()>& done, Millis timeout);

// Waits until every shard of `model` (repo `repo` on `hub`, branch main) is published in the HF
// cache `hf_cache` exactly as CheckPublished wants it; false after `timeout`.
bool WaitUntilEveryShardPublished(const std::string& hf_cache, const HubFixture& hub,
                                  const std::string& repo, const SourceModel& model,
                                  Millis timeout);

std::string Join(const std::vector<std::string>& items, const std::string& separator = "\n");

}  // namespace aprfs_rtest
