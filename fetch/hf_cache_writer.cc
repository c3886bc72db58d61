#include "fetch/hf_cache_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Byte for byte what huggingface_hub 1.9+ writes (the first line is the standard's signature).
constexpr char kCacheDirTag[] =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by huggingface_hub.\n"
    "# For information about cache directory tags, see:\n"
    "#\thttps://bford.info/cachedir/\n";

constexpr auto kLockPoll = std::chrono::milliseconds(50);  // py-filelock's default interval
constexpr auto kLockLogEvery = std::chrono::seconds(10);   // huggingface_hub logs as often
constexpr size_t kCopyChunk = 64u << 20;                   // per copy_file_range call
constexpr size_t kReadWriteChunk = 1u << 20;               // per read/write when it falls back

class PublishError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void Fail(const std::string& what) { throw PublishError(what); }

[[noreturn]] void FailErrno(int err, const std::string& what) {
  Fail(what + ": " + std::strerror(err));
}

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }

  int get() const { return fd_; }
  // For files we wrote: close() is where NFS reports a failed write-back.
  void Close(const std::string& path) {
    int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) FailErrno(errno, "cannot close " + path);
  }

 private:
  int fd_;
};

std::string RandomHex(size_t digits) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::random_device random;  // getrandom(2) on Linux
  std::string out;
  while (out.size() < digits) {
    uint32_t bits = random();
    for (int i = 0; i < 8 && out.size() < digits; ++i, bits >>= 4) out += kDigits[bits & 0xF];
  }
  return out;
}

std::string Parent(const std::string& path) { return fs::path(path).parent_path().string(); }

void MakeDirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) Fail("cannot create folder " + dir + ": " + ec.message());
}

void WriteAll(int fd, const char* data, size_t length, const std::string& path) {
  while (length > 0) {
    ssize_t n = ::write(fd, data, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      FailErrno(errno, "cannot write " + path);
    }
    data += n;
    length -= static_cast<size_t>(n);
  }
}

// ---- Validation (hf-hub.md §6.3 step 1) ----

bool IsLowerHex(const std::string& text, size_t length) {
  return text.size() == length && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

bool IsIdPart(const std::string& part) {
  auto is_word = [](char c) { return IsIdChar(c) && c != '-' && c != '.'; };
  return !part.empty() && std::all_of(part.begin(), part.end(), IsIdChar) &&
         is_word(part.front()) && is_word(part.back());
}

// huggingface_hub's validate_repo_id: [org/]name of [A-Za-z0-9_.-], no "--" (the folder
// name uses it as the separator) and no "..".
void CheckRepoId(const std::string& repo_id) {
  size_t slash = repo_id.find('/');
  bool ok = repo_id.size() <= 96 && repo_id.find("--") == std::string::npos &&
            repo_id.find("..") == std::string::npos;
  if (ok && slash == std::string::npos) {
    ok = IsIdPart(repo_id);
  } else if (ok) {
    ok = IsIdPart(repo_id.substr(0, slash)) && IsIdPart(repo_id.substr(slash + 1));
  }
  if (!ok) Fail("invalid repo id '" + repo_id + "'");
}

// A relative path that stays inside its folder: no absolute form, no backslash (a Windows
// separator), no empty, "." or ".." segment. Returns the segments.
std::vector<std::string> SplitRelativePath(const std::string& path, const std::string& what) {
  auto bad = [&](const std::string& why) { Fail("invalid " + what + " '" + path + "': " + why); };
  if (path.empty()) bad("empty");
  if (path.front() == '/') bad("absolute");
  if (path.find('\\') != std::string::npos) bad("contains a backslash");
  if (path.find('\0') != std::string::npos) bad("contains a NUL byte");
  std::vector<std::string> segments;
  size_t start = 0;
  for (;;) {
    size_t end = path.find('/', start);
    std::string segment = path.substr(start, end == std::string::npos ? end : end - start);
    if (segment.empty()) bad("empty segment");
    if (segment == "." || segment == "..") bad("'" + segment + "' segment");
    segments.push_back(std::move(segment));
    if (end == std::string::npos) return segments;
    start = end + 1;
  }
}

// ---- Where everything goes ----

struct CachePaths {
  std::string repo;         // $CACHE/models--org--name
  std::string lock;         // $CACHE/.locks/models--org--name/<etag>.lock
  std::string blobs;        // <repo>/blobs
  std::string blob;         // <repo>/blobs/<etag>
  std::string link;         // <repo>/snapshots/<commit>/<path_in_repo>
  std::string link_target;  // ../../blobs/<etag>, one more ../ per subfolder
  std::string snapshot;     // <repo>/snapshots/<commit>
  std::string ref;          // <repo>/refs/<branch>; empty: no ref to write
};

CachePaths PlanPaths(const PublishRequest& request) {
  if (request.cache_dir.empty()) Fail("no cache folder given");
  CheckRepoId(request.repo_id);
  if (!IsLowerHex(request.commit, 40)) {
    Fail("commit '" + request.commit + "' is not 40 lowercase hex digits");
  }
  if (!IsLowerHex(request.etag, 64) && !IsLowerHex(request.etag, 40)) {
    Fail("etag '" + request.etag + "' is neither a sha256 nor a git sha1 in lowercase hex");
  }
  if (request.source_path.empty()) Fail("no source file given");
  std::vector<std::string> segments = SplitRelativePath(request.path_in_repo, "path in repo");

  CachePaths paths;
  std::string folder = ModelRepoFolderName(request.repo_id);
  paths.repo = request.cache_dir + "/" + folder;
  paths.lock = request.cache_dir + "/.locks/" + folder + "/" + request.etag + ".lock";
  paths.blobs = paths.repo + "/blobs";
  paths.blob = paths.blobs + "/" + request.etag;
  paths.snapshot = paths.repo + "/snapshots/" + request.commit;
  paths.link = paths.snapshot + "/" + request.path_in_repo;
  for (size_t i = 0; i < segments.size() + 1; ++i) paths.link_target += "../";
  paths.link_target += "blobs/" + request.etag;
  if (request.branch) {
    SplitRelativePath(*request.branch, "branch");
    // The official client never writes a ref for a full commit hash (hf-hub.md §6.1).
    if (!IsLowerHex(*request.branch, 40)) paths.ref = paths.repo + "/refs/" + *request.branch;
  }
  return paths;
}

// ---- CACHEDIR.TAG (best effort, as huggingface_hub does: a read-only cache root is fine) ----

void WriteCacheDirTag(const std::string& cache_dir) {
  std::string path = cache_dir + "/CACHEDIR.TAG";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (fd.get() < 0) {
    if (errno != EEXIST) spdlog::warn("cannot create {}: {}", path, std::strerror(errno));
    return;
  }
  try {
    WriteAll(fd.get(), kCacheDirTag, sizeof(kCacheDirTag) - 1, path);
    fd.Close(path);
  } catch (const PublishError& e) {
    spdlog::warn("{}", e.what());
    ::unlink(path.c_str());  // a truncated tag would be worse than none
  }
}

// ---- The per-blob lock (hf-hub.md §6.3 step 2) ----

UniqueFd OpenLockFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0664));
  if (fd.get() < 0) FailErrno(errno, "cannot open lock file " + path);
  // The umask would drop group write; users sharing a cache must be able to open each
  // other's lock files. EPERM: another user owns it, and chose its mode.
  if (::fchmod(fd.get(), 0664) != 0 && errno != EPERM) {
    FailErrno(errno, "cannot chmod lock file " + path);
  }
  return fd;
}

// Polls flock until it is ours or the deadline passes.
void WaitForFlock(int fd, const std::string& path, Clock::time_point start,
                  Clock::time_point deadline) {
  Clock::time_point next_log = start + kLockLogEvery;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return;
    int err = errno;
    if (err == EINTR) continue;
    if (err == ENOSYS || err == EOPNOTSUPP) {
      Fail("cannot lock " + path + ": flock is not supported on this filesystem (" +
           std::strerror(err) + "); not writing into the cache without a lock");
    }
    if (err != EWOULDBLOCK && err != EACCES) FailErrno(err, "cannot lock " + path);
    Clock::time_point now = Clock::now();
    if (now >= deadline) {
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      Fail("timed out after " + std::to_string(waited.count()) + " ms waiting for the lock " +
           path + " (another process is writing this blob)");
    }
    if (now >= next_log) {
      spdlog::info("still waiting for the lock {} (another process is writing this blob)", path);
      next_log += kLockLogEvery;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(kLockPoll, deadline - now));
  }
}

// py-filelock 3.20.4-3.29.4 unlink the lock file on release: a lock on the unlinked inode (or
// on an inode that no longer sits at the path) excludes nobody.
bool LockedFileIsCurrent(int fd, const std::string& path) {
  struct stat held;
  struct stat now;
  if (::fstat(fd, &held) != 0) FailErrno(errno, "cannot stat lock file " + path);
  if (held.st_nlink == 0) return false;
  if (::lstat(path.c_str(), &now) != 0) {
    if (errno == ENOENT) return false;
    FailErrno(errno, "cannot stat lock file " + path);
  }
  return now.st_dev == held.st_dev && now.st_ino == held.st_ino;
}

// Held for the life of the object. The lock file itself is never deleted: deleting it let
// two holders in (py-filelock PR #577).
class BlobLock {
 public:
  BlobLock(const std::string& path, std::chrono::milliseconds timeout) {
    Clock::time_point start = Clock::now();
    Clock::time_point deadline = start + timeout;
    for (;;) {
      UniqueFd fd = OpenLockFile(path);
      WaitForFlock(fd.get(), path, start, deadline);
      if (LockedFileIsCurrent(fd.get(), path)) {
        fd_ = std::move(fd);
        return;
      }
      if (Clock::now() >= deadline) {
        Fail("timed out waiting for the lock " + path + " (it keeps being replaced)");
      }
    }
  }
  ~BlobLock() { ::flock(fd_.get(), LOCK_UN); }  // then fd_ closes
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  UniqueFd fd_;
};

// ---- The blob (hf-hub.md §6.3 steps 3-5) ----

// Under the lock, an existing blob is final (writers rename complete files into place).
bool BlobPresent(const std::string& blob, uint64_t size) {
  struct stat st;
  if (::stat(blob.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    FailErrno(errno, "cannot stat " + blob);
  }
  if (!S_ISREG(st.st_mode)) Fail(blob + " exists but is not a regular file");
  if (static_cast<uint64_t>(st.st_size) != size) {
    Fail(blob + " already exists with " + std::to_string(st.st_size) + " bytes, but " +
         std::to_string(size) + " were expected; not replacing it");
  }
  return true;
}

// A file under a temporary name that must not outlive a failed publish. A moved source goes
// back where it came from instead.
class TempFileGuard {
 public:
  TempFileGuard() = default;
  TempFileGuard(std::string path, std::string restore_to = {})
      : path_(std::move(path)), restore_to_(std::move(restore_to)) {}
  ~TempFileGuard() {
    if (path_.empty()) return;
    if (!restore_to_.empty() && ::rename(path_.c_str(), restore_to_.c_str()) == 0) return;
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("cannot remove temporary file {}: {}", path_, std::strerror(errno));
    }
  }
  TempFileGuard(TempFileGuard&& other) noexcept
      : path_(std::exchange(other.path_, {})), restore_to_(std::move(other.restore_to_)) {}
  TempFileGuard& operator=(TempFileGuard&& other) noexcept {
    std::swap(path_, other.path_);
    std::swap(restore_to_, other.restore_to_);
    return *this;
  }

  // The file has its final name now.
  void Release() { path_.clear(); }

 private:
  std::string path_;
  std::string restore_to_;
};

struct OpenSource {
  UniqueFd fd;
  struct stat st {};
};

OpenSource OpenSourceFile(const std::string& path) {
  OpenSource source;
  source.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (source.fd.get() < 0) FailErrno(errno, "cannot open source " + path);
  if (::fstat(source.fd.get(), &source.st) != 0) FailErrno(errno, "cannot stat source " + path);
  if (!S_ISREG(source.st.st_mode)) Fail("source " + path + " is not a regular file");
  return source;
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// lstat, or nullopt when nothing is at the path.
std::optional<struct stat> LstatIfExists(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return st;
  if (errno == ENOENT) return std::nullopt;
  FailErrno(errno, "cannot stat " + path);
}

// Never "<etag>.incomplete": a 0.x client would append to it, or move it into place unchecked.
std::string TempBlobPath(const CachePaths& paths, const std::string& etag) {
  return paths.blobs + "/" + etag + "." + RandomHex(8) + ".incomplete";
}

// Exclusively creates a private temp blob (a name clash just draws another name).
std::pair<UniqueFd, std::string> CreateTempBlob(const CachePaths& paths, const std::string& etag) {
  for (int attempt = 0;; ++attempt) {
    std::string path = TempBlobPath(paths, etag);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd.get() >= 0) return {std::move(fd), path};
    if (errno != EEXIST || attempt == 8) FailErrno(errno, "cannot create " + path);
  }
}

// Errors from copy_file_range that mean "not here" rather than "failed": use read/write.
bool CopyFileRangeUnsupported(int err) {
  return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP;
}

// One read + write of up to kReadWriteChunk bytes at `offset`; the bytes copied, 0 at EOF.
ssize_t ReadWriteChunk(int src, int dst, uint64_t offset, size_t want, std::vector<char>& buffer,
                       const std::string& src_path, const std::string& dst_path) {
  buffer.resize(kReadWriteChunk);
  want = std::min(want, buffer.size());
  ssize_t n;
  do {
    n = ::pread(src, buffer.data(), want, static_cast<off_t>(offset));
  } while (n < 0 && errno == EINTR);
  if (n < 0) FailErrno(errno, "cannot read " + src_path + " at offset " + std::to_string(offset));
  size_t written = 0;
  while (written < static_cast<size_t>(n)) {
    ssize_t w = ::pwrite(dst, buffer.data() + written, static_cast<size_t>(n) - written,
                         static_cast<off_t>(offset + written));
    if (w < 0) {
      if (errno == EINTR) continue;
      FailErrno(errno, "cannot write " + dst_path);
    }
    written += static_cast<size_t>(w);
  }
  return n;
}

// Copies exactly `size` bytes: copy_file_range (reflinks / in-kernel copy) while the
// filesystems allow it, read/write otherwise. A source shorter than `size` is an error.
void CopyBytes(int src, int dst, uint64_t size, const std::string& src_path,
               const std::string& dst_path) {
  bool kernel_copy = true;
  std::vector<char> buffer;
  uint64_t done = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(size - done, kCopyChunk));
    if (kernel_copy) {
      loff_t in = static_cast<loff_t>(done);
      loff_t out = static_cast<loff_t>(done);
      ssize_t n = ::copy_file_range(src, &in, dst, &out, want, 0);
      if (n > 0) {
        done += static_cast<uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && !CopyFileRangeUnsupported(errno)) {
        FailErrno(errno, "cannot copy " + src_path + " to " + dst_path);
      }
      // Unsupported, or 0: some filesystems report 0 where read() would not, so let read()
      // decide whether this really is the end of the file.
      kernel_copy = false;
      continue;
    }
    ssize_t n = ReadWriteChunk(src, dst, done, want, buffer, src_path, dst_path);
    if (n == 0) {
      Fail("source " + src_path + " ends after " + std::to_string(done) + " bytes, but " +
           std::to_string(size) + " were expected");
    }
    done += static_cast<uint64_t>(n);
  }
}

void CheckSize(int fd, const std::string& path, uint64_t size, const char* what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) FailErrno(errno, "cannot stat " + path);
  if (static_cast<uint64_t>(st.st_size) != size) {
    Fail(std::string(what) + " " + path + " has " + std::to_string(st.st_size) + " bytes, but " +
         std::to_string(size) + " were expected");
  }
}

// The mode a file created in `dir` gets (umask, default ACLs), learnt by creating one, as
// huggingface_hub's _chmod_and_move does: blobs must be readable by whoever could read the
// rest of the cache.
mode_t ProbeNewFileMode(const std::string& dir) {
  std::string probe = dir + "/tmp_" + RandomHex(32);
  UniqueFd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (fd.get() < 0) FailErrno(errno, "cannot create " + probe + " to learn the file mode");
  struct stat st;
  int rc = ::fstat(fd.get(), &st);
  int err = errno;
  if (::unlink(probe.c_str()) != 0) {
    spdlog::warn("cannot remove {}: {}", probe, std::strerror(errno));
  }
  if (rc != 0) FailErrno(err, "cannot stat " + probe);
  return st.st_mode & 07777;
}

// Moves the source to a temp blob name when rename(2) can; returns false (nothing done) when
// the source is on another filesystem or is a symlink, so the caller copies instead.
bool TryMoveSource(OpenSource& source, const PublishRequest& request, const CachePaths& paths,
                   UniqueFd& temp_fd, std::string& temp_path, TempFileGuard& guard) {
  std::optional<struct stat> link = LstatIfExists(request.source_path);
  if (!link || !SameFile(*link, source.st)) return false;  // a symlink: copy what it points to
  // Checked before the move, so a wrong file never leaves the caller's hands.
  CheckSize(source.fd.get(), request.source_path, request.size, "source");
  // No O_EXCL for rename; the name is random and only the lock holder uses this etag prefix.
  std::string temp = TempBlobPath(paths, request.etag);
  if (::rename(request.source_path.c_str(), temp.c_str()) != 0) {
    if (errno == EXDEV) return false;
    FailErrno(errno, "cannot move " + request.source_path + " to " + temp);
  }
  guard = TempFileGuard(temp, request.source_path);
  std::optional<struct stat> moved = LstatIfExists(temp);
  if (!moved || !SameFile(*moved, source.st)) {
    Fail(request.source_path + " was replaced while it was being moved into the cache");
  }
  temp_fd = std::move(source.fd);
  temp_path = temp;
  return true;
}

// Puts the source bytes at blobs/<etag>. Returns whether the source itself was renamed.
bool WriteBlob(const PublishRequest& request, const CachePaths& paths) {
  MakeDirs(paths.blobs);
  OpenSource source = OpenSourceFile(request.source_path);
  UniqueFd temp_fd;
  std::string temp;
  TempFileGuard guard;
  bool moved =
      request.move_source && TryMoveSource(source, request, paths, temp_fd, temp, guard);
  if (!moved) {
    std::tie(temp_fd, temp) = CreateTempBlob(paths, request.etag);
    guard = TempFileGuard(temp);
    CopyBytes(source.fd.get(), temp_fd.get(), request.size, request.source_path, temp);
    // A source longer than `size` is not the file the etag names either.
    CheckSize(source.fd.get(), request.source_path, request.size, "source");
  }
  CheckSize(temp_fd.get(), temp, request.size, "temporary blob");
  if (::fsync(temp_fd.get()) != 0) FailErrno(errno, "cannot fsync " + temp);
  if (::fchmod(temp_fd.get(), ProbeNewFileMode(paths.repo)) != 0) {
    FailErrno(errno, "cannot chmod " + temp);
  }
  temp_fd.Close(temp);
  if (::rename(temp.c_str(), paths.blob.c_str()) != 0) {
    FailErrno(errno, "cannot rename " + temp + " to " + paths.blob);
  }
  guard.Release();
  return moved;
}

// ---- Snapshot link and ref (hf-hub.md §6.3 steps 6-7) ----

// snapshots/<commit>/<path> -> ../../blobs/<etag>, replacing whatever was there (a plain file
// from a no-symlink client, a link to another blob) atomically.
void LinkSnapshot(const CachePaths& paths) {
  MakeDirs(Parent(paths.link));
  char existing[PATH_MAX];
  ssize_t n = ::readlink(paths.link.c_str(), existing, sizeof(existing));
  if (n >= 0 && std::string(existing, static_cast<size_t>(n)) == paths.link_target) return;
  if (n < 0 && errno != ENOENT && errno != EINVAL) FailErrno(errno, "cannot read " + paths.link);
  std::optional<struct stat> st = LstatIfExists(paths.link);
  if (st && S_ISDIR(st->st_mode)) Fail(paths.link + " is a folder, not a file");
  // Same folder as the link, so the rename is atomic; a leftover would still be a valid link.
  std::string temp = Parent(paths.link) + "/." + fs::path(paths.link).filename().string() +
                     ".aprfs-" + RandomHex(8) + ".tmp";
  if (::symlink(paths.link_target.c_str(), temp.c_str()) != 0) {
    FailErrno(errno, "cannot create symlink " + temp);
  }
  if (::rename(temp.c_str(), paths.link.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    FailErrno(err, "cannot rename " + temp + " to " + paths.link);
  }
}

// The content of a small file, or nullopt when it does not exist.
std::optional<std::string> ReadRefFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    FailErrno(errno, "cannot open " + path);
  }
  std::string content;
  char buffer[256];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      FailErrno(errno, "cannot read " + path);
    }
    if (n == 0 || content.size() > 4096) return content;  // a ref is 40 bytes
    content.append(buffer, static_cast<size_t>(n));
  }
}

// refs/<branch> = commit, no newline (Python reads it unstripped), only when it changed.
void UpdateRef(const CachePaths& paths, const std::string& commit) {
  struct stat st;
  if (::stat(paths.snapshot.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return;  // a ref to a missing snapshot makes scan_cache_dir report corruption
  }
  if (ReadRefFile(paths.ref) == commit) return;
  MakeDirs(Parent(paths.ref));
  // The temp file sits in the repo folder, not refs/: scan_cache_dir would read a leftover
  // one in refs/ as a ref to a missing commit.
  std::string temp = paths.repo + "/tmp_ref_" + RandomHex(16);
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (fd.get() < 0) FailErrno(errno, "cannot create " + temp);
  TempFileGuard guard(temp);
  WriteAll(fd.get(), commit.data(), commit.size(), temp);
  if (::fsync(fd.get()) != 0) FailErrno(errno, "cannot fsync " + temp);
  fd.Close(temp);
  if (::rename(temp.c_str(), paths.ref.c_str()) != 0) {
    FailErrno(errno, "cannot rename " + temp + " to " + paths.ref);
  }
  guard.Release();
}

// Undoes the move of a source into blobs/ (same filesystem: a rename needs no room).
void RestoreSource(const std::string& blob, const std::string& source) {
  if (::rename(blob.c_str(), source.c_str()) != 0) {
    spdlog::error("cannot move {} back to {}: {}", blob, source, std::strerror(errno));
  }
}

// move_source promises the source is gone: copied and then unlinked, or not needed.
void ConsumeSource(const std::string& source, const std::string& blob) {
  std::optional<struct stat> src = LstatIfExists(source);
  if (!src) return;
  std::optional<struct stat> dst = LstatIfExists(blob);
  if (dst && SameFile(*src, *dst)) return;  // the caller named the blob itself
  if (::unlink(source.c_str()) != 0) FailErrno(errno, "cannot remove source " + source);
}

}  // namespace

std::string ModelRepoFolderName(const std::string& repo_id) {
  std::string folder = "models--";
  for (char c : repo_id) {
    if (c == '/') {
      folder += "--";
    } else {
      folder += c;
    }
  }
  return folder;
}

PublishResult PublishToHfCache(const PublishRequest& request) {
  PublishResult result;
  try {
    CachePaths paths = PlanPaths(request);
    MakeDirs(request.cache_dir);
    WriteCacheDirTag(request.cache_dir);
    MakeDirs(Parent(paths.lock));
    bool moved = false;
    {
      BlobLock lock(paths.lock, request.lock_timeout);
      result.already_present = BlobPresent(paths.blob, request.size);
      if (!result.already_present) moved = WriteBlob(request, paths);
      try {
        LinkSnapshot(paths);
      } catch (const std::exception&) {
        // A moved source that nothing links to goes back: the caller keeps reading (and may
        // punch holes into) the file it still owns, and finds it again after a restart. On a
        // full disk the rename into blobs/ succeeds where the link's block cannot be had.
        if (moved) RestoreSource(paths.blob, request.source_path);
        throw;
      }
      if (!paths.ref.empty()) {
        // The blob is published once linked: a ref that cannot be written (a full disk) only
        // leaves the branch name unresolved offline, as before this call.
        try {
          UpdateRef(paths, request.commit);
        } catch (const std::exception& e) {
          spdlog::warn("{}: published, but the ref was not updated: {}", paths.link, e.what());
        }
      }
    }
    if (request.move_source && !moved) ConsumeSource(request.source_path, paths.blob);
    result.ok = true;
    spdlog::debug("published {} of {}@{} as {}{}", request.path_in_repo, request.repo_id,
                  request.commit, paths.blob, result.already_present ? " (already there)" : "");
  } catch (const std::exception& e) {  // PublishError, filesystem or allocation errors
    result.ok = false;
    result.error = e.what();
  }
  return result;
}

}  // namespace aprfs
