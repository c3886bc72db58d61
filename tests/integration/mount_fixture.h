#pragma once

// Shared machinery of the integration tests that really mount aprfs: running commands with
// deadlines, starting and stopping the daemon, reading /proc/self/mountinfo, an independent
// parse of the APR v2 index (apr-v2-format.md §3, §5.1) and byte-for-byte checks of a mounted
// file against the tensors the test writer produced.
//
// Safety rules every test relies on:
//  * every wait has a deadline (commands, mount, unmount, child processes);
//  * a per-test watchdog kills the daemon (which aborts the FUSE connection, so no syscall of
//    the test can stay blocked in the kernel) if a test runs far longer than it should;
//  * TearDown unmounts (`aprfs umount`, then a lazy unmount) and reaps the daemon even when
//    the test failed; a crash handler lazily unmounts too if the test binary dies.

#include <gtest/gtest.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/model_writer.h"

namespace aprfs_itest {

namespace tw = aprfs::testing;
using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;

// ----- processes ------------------------------------------------------------------------------

struct ProcResult {
  int exit_code = -1;  // exit status; -1 when killed by a signal, timed out or not started
  int signal = 0;      // the signal that ended it, if any
  bool timed_out = false;
  std::string out;
  std::string err;
  std::string Describe() const;  // for failure messages
};

// Runs argv (argv[0] looked up in PATH) with stdin from /dev/null and stdout/stderr captured in
// temporary files (never pipes: a daemon that inherits them must not make us wait). Kills the
// process group on timeout.
ProcResult RunCommand(const std::vector<std::string>& argv, Millis timeout = 60s);
ProcResult RunAprfs(const std::vector<std::string>& args, Millis timeout = 60s);
// python3 aprcheck.py FILE [--source DIR] extra...
ProcResult RunAprcheck(const std::string& file, const std::string& source_dir,
                       const std::vector<std::string>& extra = {}, Millis timeout = 90s);
// python3 make_model.py args...
ProcResult RunMakeModel(const std::vector<std::string>& args, Millis timeout = 60s);

std::string AprfsBinary();
std::string ToolsDir();

// A forked child running `body` (its return value is the exit code). Its stderr goes to a
// temporary file that WaitChild returns as `err`. The body must not use gtest.
struct Child {
  pid_t pid = -1;
  std::string err_path;
};
Child StartChild(const std::function<int()>& body);
ProcResult WaitChild(Child& child, Millis timeout);

// Alive = exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// rchar of /proc/PID/io (bytes the process obtained through read-like syscalls); nullopt if
// unreadable.
std::optional<uint64_t> ProcessRchar(pid_t pid);
// A "VmHWM" / "VmRSS" / ... line of /proc/PID/status in KiB; 0 if unreadable.
uint64_t ProcStatusKb(pid_t pid, const std::string& key);
// aprfs daemons whose command line names this mountpoint (background mode forks one).
std::vector<pid_t> FindDaemonPids(const std::string& mountpoint);

// ----- mounts ---------------------------------------------------------------------------------

struct MountEntry {
  std::string device;  // "0:42"
  std::string mountpoint;
  std::string fstype;  // "fuse.aprfs"
};
std::vector<MountEntry> ReadMountInfo();
std::optional<MountEntry> FindMount(const std::string& mountpoint);
bool IsAprfsMounted(const std::string& mountpoint);

// Crash-safety registry: mounts and daemon pids that a fatal signal handler detaches/kills.
void RegisterForCrashCleanup(const std::string& mountpoint, pid_t pid);
void UnregisterFromCrashCleanup(const std::string& mountpoint);

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
  void Close();

 private:
  int fd_ = -1;
};

// pread until `length` bytes or end of file; returns the byte count or -errno.
int64_t PreadFull(int fd, char* dst, uint64_t length, uint64_t offset);
// The whole file through read(2) in `chunk` pieces; sets *error (errno) on failure. A short
// read before the end of the file is reported as an error too (design.md read rule 1).
bool ReadWholeFile(const std::string& path, std::string* out, std::string* error,
                   size_t chunk = 1 << 20);
std::string SlurpOrEmpty(const std::string& path);
// The names in a folder, sorted (empty when it cannot be read).
std::vector<std::string> ListDir(const std::string& dir);
// Drops the clean page-cache pages of a file so the next reads reach the filesystem.
void DropPageCache(const std::string& path);
uint64_t FileSize(const std::string& path);

// ----- APR v2 ---------------------------------------------------------------------------------

struct AprEntry {
  std::string name;
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // relative to data_offset
  uint64_t size = 0;
};

struct AprLayout {
  std::string error;  // empty when the header and index parsed
  uint64_t file_size = 0;
  uint32_t tensor_count = 0;
  uint64_t metadata_offset = 0;
  uint32_t metadata_size = 0;
  uint64_t index_offset = 0;
  uint64_t data_offset = 0;
  std::vector<AprEntry> entries;
  std::string metadata_json;
  const AprEntry* Find(const std::string& name) const;
};

// Independent parse of the header (§3) and index (§5.1) through pread on the file.
AprLayout ParseAprFile(const std::string& path);
// The same over bytes in memory.
AprLayout ParseAprBytes(const std::string& bytes);

// APR dtype code for a safetensors dtype (apr-v2-format.md §6; BOOL is stored as U8).
int AprCodeOf(const std::string& safetensors_dtype);

// A model of `shards` shards of about `bytes_per_shard` bytes each, tensors of odd sizes
// (no config.json / tokenizer.json). Tensor names: blk.<k>.{norm.weight,weight,bias,odd}.
tw::TestModel BulkModel(int shards, uint64_t bytes_per_shard, uint32_t seed = 1,
                        bool unaligned = true);

// What a mounted model must contain: name -> dtype, shape, bytes.
struct ExpectedTensor {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::string bytes;
};
using ExpectedTensors = std::map<std::string, ExpectedTensor>;
// Every tensor of the writer's model; `synthesized_lm_head` adds lm_head.weight = embedding.
ExpectedTensors ExpectedOf(const tw::TestModel& model, bool synthesized_lm_head = false);

// First differing position of two byte strings, or nullopt if equal.
std::optional<uint64_t> FirstDifference(const std::string& a, const std::string& b);

// gtest checks: the parsed layout holds exactly `expected` (names, dtype codes, shapes, sizes,
// 64-byte aligned offsets inside the file).
void ExpectLayoutMatches(const AprLayout& layout, const ExpectedTensors& expected);
// gtest checks: tensor bytes of `file_bytes` at data_offset + offset equal the expected bytes.
void ExpectTensorBytes(const AprLayout& layout, const ExpectedTensors& expected,
                       const std::string& file_bytes, const std::string& how);

// The complete check of one mounted model (test 1): parse the index from the mounted bytes,
// compare every tensor through read(), buffered pread, O_DIRECT pread (exact unaligned
// offsets straight to the daemon) and mmap, cross-check with aprcheck.py --json, and run
// aprcheck.py --source (pread and --mmap).
void VerifyMountedModel(const std::string& apr_path, const std::string& source_dir,
                        const ExpectedTensors& expected);

// ----- the fixture ----------------------------------------------------------------------------

class MountTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Layout of the scratch folder: root/models (sources), root/mnt (mountpoint), root/work.
  const std::string& root() const { return root_; }
  const std::string& models_dir() const { return models_dir_; }
  const std::string& mountpoint() const { return mountpoint_; }
  const std::string& work_dir() const { return work_dir_; }
  std::string MP(const std::string& relative) const { return mountpoint_ + "/" + relative; }
  std::string Model(const std::string& name) const { return models_dir_ + "/" + name; }

  // Starts `aprfs mount MOUNTPOINT -f <args> --log-file LOG` as a child process and waits
  // until the mountpoint is a fuse.aprfs mount. Fatal failure (with the daemon's log) if not.
  void Mount(const std::vector<std::string>& args);
  // Convenience: --no-hf-cache --source models_dir().
  void MountModels() { Mount({"--no-hf-cache", "--source", models_dir_}); }
  // Unmounts and reaps the daemon; returns false (after forcing) if it did not go cleanly.
  bool Unmount(std::string* problem = nullptr);
  // For background mounts started by the test itself: makes TearDown clean them up.
  void AdoptMount(const std::string& mountpoint);

  pid_t daemon_pid() const { return daemon_pid_; }
  // The daemon is still running (neither exited nor zombie).
  bool DaemonAlive();
  // "running", or how it ended ("killed by signal 11 (Segmentation fault)").
  std::string DaemonState();
  std::string DaemonLog() const;
  // Waits for the foreground daemon to exit; its wait status, or nullopt on timeout.
  std::optional<int> WaitDaemonExit(Millis timeout);
  // Time budget of this test; when exceeded the watchdog kills the daemon so that every
  // blocked read returns, and the test fails.
  void SetWatchdog(std::chrono::seconds budget);

 private:
  void StartWatchdog(std::chrono::seconds budget);
  void StopWatchdog();
  void CleanupMountpoint(const std::string& mountpoint, std::vector<std::string>* problems);

  std::string root_, models_dir_, mountpoint_, work_dir_, log_file_, daemon_out_;
  std::atomic<pid_t> daemon_pid_{-1};
  int daemon_status_ = 0;
  bool daemon_reaped_ = false;
  std::vector<std::string> adopted_;

  std::thread watchdog_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  std::chrono::steady_clock::time_point watchdog_deadline_;
  bool watchdog_stop_ = false;
  std::atomic<bool> watchdog_fired_{false};
};

}  // namespace aprfs_itest
