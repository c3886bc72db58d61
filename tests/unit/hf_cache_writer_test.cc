// Publishing a complete file into the Hugging Face cache (fetch/hf_cache_writer.h,
// hf-hub.md §6.3): the exact layout, idempotence, move vs copy, bad input, the cross-process
// lock, cleanup after failures, and that our own cache reader accepts the result.
#include "fetch/hf_cache_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fetch/hf_cache.h"
#include "fetch/local_model.h"
#include "fetch/sha256.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using testing::MakeTensor;
using testing::PseudoRandomBytes;
using testing::TempDir;
using testing::TestModel;
using testing::WriteFile;
using testing::WriteModel;

constexpr char kRepo[] = "org/name";
constexpr char kFolder[] = "models--org--name";

std::string Commit(char c) { return std::string(40, c); }

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string ReadLink(const std::string& path) {
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  return ec ? "<not a symlink: " + ec.message() + ">" : target.string();
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Every entry under `root` (symlinks not followed), relative, sorted.
std::set<std::string> Tree(const std::string& root) {
  std::set<std::string> entries;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    entries.insert(it->path().lexically_relative(root).string());  // relative() would follow links
  }
  return entries;
}

// Leftovers a failed or concurrent publish must never leave behind.
std::vector<std::string> TempLeftovers(const std::string& root) {
  std::vector<std::string> found;
  for (const std::string& entry : Tree(root)) {
    std::string name = fs::path(entry).filename().string();
    if (name.find(".incomplete") != std::string::npos || name.rfind("tmp_", 0) == 0 ||
        name.find(".tmp") != std::string::npos) {
      found.push_back(entry);
    }
  }
  return found;
}

class HfCacheWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A umask that differs from both the 0600 temp files and the 0644 default, so the blob
    // mode proves the umask probe.
    old_umask_ = ::umask(027);
    log_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
  }
  void TearDown() override {
    ::umask(old_umask_);
    spdlog::set_level(log_level_);
  }

  std::string cache() const { return root_ / "hub"; }
  std::string repo() const { return cache() + "/" + kFolder; }

  // A source file outside the cache (same filesystem) with `bytes`.
  std::string Source(const std::string& name, const std::string& bytes) {
    std::string path = root_ / ("downloads/" + name);
    fs::create_directories(fs::path(path).parent_path());
    WriteFile(path, bytes);
    return path;
  }

  PublishRequest Request(const std::string& path_in_repo, const std::string& bytes,
                         const std::string& source, std::optional<std::string> branch = "main") {
    PublishRequest request;
    request.cache_dir = cache();
    request.repo_id = kRepo;
    request.commit = Commit('a');
    request.branch = std::move(branch);
    request.path_in_repo = path_in_repo;
    request.etag = Sha256Hex(bytes);
    request.source_path = source;
    request.size = bytes.size();
    request.lock_timeout = std::chrono::milliseconds(5000);
    return request;
  }

  mode_t old_umask_ = 0;
  spdlog::level::level_enum log_level_ = spdlog::level::info;
  TempDir root_;
};

TEST_F(HfCacheWriterTest, PublishCreatesExactlyTheOfficialLayout) {
  std::string bytes = PseudoRandomBytes(100000, 1);
  std::string source = Source("model.safetensors", bytes);
  PublishRequest request = Request("model.safetensors", bytes, source);
  PublishResult result = PublishToHfCache(request);
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_FALSE(result.already_present);
  EXPECT_TRUE(result.error.empty());

  const std::string etag = request.etag;
  const std::string snapshot = "snapshots/" + Commit('a');
  EXPECT_EQ(Tree(repo()), (std::set<std::string>{"blobs", "blobs/" + etag, "refs", "refs/main",
                                                 "snapshots", snapshot,
                                                 snapshot + "/model.safetensors"}));
  // The blob: the bytes, a regular file, the mode a new file in the cache gets (0666 & ~027).
  std::string blob = repo() + "/blobs/" + etag;
  struct stat blob_st = Lstat(blob);
  EXPECT_TRUE(S_ISREG(blob_st.st_mode));
  EXPECT_EQ(blob_st.st_mode & 07777, 0640u);
  EXPECT_EQ(ReadBytes(blob), bytes);
  // The snapshot entry: a relative symlink, byte for byte what os.path.relpath gives.
  std::string link = repo() + "/" + snapshot + "/model.safetensors";
  EXPECT_TRUE(S_ISLNK(Lstat(link).st_mode));
  EXPECT_EQ(ReadLink(link), "../../blobs/" + etag);
  EXPECT_EQ(ReadBytes(link), bytes);
  // The ref: 40 hex, no newline.
  EXPECT_EQ(ReadBytes(repo() + "/refs/main"), Commit('a'));
  // CACHEDIR.TAG with the standard's signature line first.
  EXPECT_EQ(ReadBytes(cache() + "/CACHEDIR.TAG").rfind("Signature: 8a477f597d28d172789f06886806bc55\n", 0),
            0u);
  // The lock file stays, group-writable despite the umask.
  std::string lock = cache() + "/.locks/" + kFolder + "/" + etag + ".lock";
  EXPECT_EQ(Lstat(lock).st_mode & 07777, 0664u);
  EXPECT_EQ(Tree(cache()), (std::set<std::string>{
                               "CACHEDIR.TAG", ".locks", std::string(".locks/") + kFolder,
                               std::string(".locks/") + kFolder + "/" + etag + ".lock", kFolder,
                               std::string(kFolder) + "/blobs", std::string(kFolder) + "/blobs/" + etag,
                               std::string(kFolder) + "/refs", std::string(kFolder) + "/refs/main",
                               std::string(kFolder) + "/snapshots",
                               std::string(kFolder) + "/" + snapshot,
                               std::string(kFolder) + "/" + snapshot + "/model.safetensors"}));
  // A copy leaves the source alone.
  EXPECT_EQ(ReadBytes(source), bytes);
}

TEST_F(HfCacheWriterTest, PublishIsIdempotent) {
  std::string bytes = PseudoRandomBytes(4096, 2);
  PublishRequest request = Request("model.safetensors", bytes, Source("a", bytes));
  ASSERT_TRUE(PublishToHfCache(request).ok);
  std::set<std::string> before = Tree(cache());
  std::string link = repo() + "/snapshots/" + Commit('a') + "/model.safetensors";
  struct stat blob = Lstat(repo() + "/blobs/" + request.etag);
  struct stat link_st = Lstat(link);
  struct stat ref = Lstat(repo() + "/refs/main");

  PublishResult again = PublishToHfCache(request);
  ASSERT_TRUE(again.ok) << again.error;
  EXPECT_TRUE(again.already_present);
  EXPECT_EQ(Tree(cache()), before);
  // Nothing was rewritten: same inodes for the blob, the link and the unchanged ref.
  EXPECT_EQ(Lstat(repo() + "/blobs/" + request.etag).st_ino, blob.st_ino);
  EXPECT_EQ(Lstat(link).st_ino, link_st.st_ino);
  EXPECT_EQ(Lstat(repo() + "/refs/main").st_ino, ref.st_ino);
}

TEST_F(HfCacheWriterTest, PublishKeepsAnExistingBlob) {
  std::string bytes = PseudoRandomBytes(5000, 3);
  PublishRequest request = Request("model.safetensors", bytes, Source("a", bytes));
  // A blob another client already downloaded.
  fs::create_directories(repo() + "/blobs");
  std::string blob = repo() + "/blobs/" + request.etag;
  WriteFile(blob, bytes);
  ino_t inode = Lstat(blob).st_ino;

  PublishResult result = PublishToHfCache(request);
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_TRUE(result.already_present);
  EXPECT_EQ(Lstat(blob).st_ino, inode);
  EXPECT_EQ(ReadLink(repo() + "/snapshots/" + Commit('a') + "/model.safetensors"),
            "../../blobs/" + request.etag);
  EXPECT_EQ(ReadBytes(repo() + "/refs/main"), Commit('a'));

  // An existing blob of the wrong size is a broken cache: reported, never replaced.
  request.size += 1;
  PublishResult wrong = PublishToHfCache(request);
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.error.find(blob), std::string::npos) << wrong.error;
  EXPECT_EQ(Lstat(blob).st_ino, inode);
}

TEST_F(HfCacheWriterTest, PublishNestedPathAndPullRequestRef) {
  std::string bytes = "{\"weight_map\":{}}";
  PublishRequest request = Request("sub/dir/model.safetensors.index.json", bytes,
                                   Source("index.json", bytes), "refs/pr/1");
  request.etag = GitBlobSha1(bytes);  // a regular (non-LFS) file is named by its git sha1
  PublishResult result = PublishToHfCache(request);
  ASSERT_TRUE(result.ok) << result.error;
  std::string link = repo() + "/snapshots/" + Commit('a') + "/sub/dir/model.safetensors.index.json";
  EXPECT_EQ(ReadLink(link), "../../../../blobs/" + request.etag);
  EXPECT_EQ(ReadBytes(link), bytes);
  EXPECT_EQ(ReadBytes(repo() + "/refs/refs/pr/1"), Commit('a'));
  EXPECT_FALSE(Exists(repo() + "/refs/main"));
}

TEST_F(HfCacheWriterTest, PublishWritesRefsOnlyForBranchesAndOnlyWhenChanged) {
  std::string bytes = "abc";
  // No branch: no refs/ at all.
  PublishRequest request = Request("a.txt", bytes, Source("a", bytes), std::nullopt);
  ASSERT_TRUE(PublishToHfCache(request).ok);
  EXPECT_FALSE(Exists(repo() + "/refs"));
  // A full commit as the "branch": the official client writes no ref for it either.
  request.branch = Commit('a');
  ASSERT_TRUE(PublishToHfCache(request).ok);
  EXPECT_FALSE(Exists(repo() + "/refs"));
  // A ref another tool wrote with a newline is rewritten without one.
  fs::create_directories(repo() + "/refs");
  WriteFile(repo() + "/refs/main", Commit('a') + "\n");
  request.branch = "main";
  ASSERT_TRUE(PublishToHfCache(request).ok);
  EXPECT_EQ(ReadBytes(repo() + "/refs/main"), Commit('a'));
  // A new commit moves the branch; the old snapshot stays.
  request.commit = Commit('b');
  ASSERT_TRUE(PublishToHfCache(request).ok);
  EXPECT_EQ(ReadBytes(repo() + "/refs/main"), Commit('b'));
  EXPECT_TRUE(Exists(repo() + "/snapshots/" + Commit('a') + "/a.txt"));
  EXPECT_TRUE(Exists(repo() + "/snapshots/" + Commit('b') + "/a.txt"));
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

TEST_F(HfCacheWriterTest, PublishReplacesAPlainFileInTheSnapshot) {
  // A client without symlink support leaves real files in snapshots/.
  std::string bytes = "content";
  std::string link = repo() + "/snapshots/" + Commit('a') + "/a.txt";
  fs::create_directories(fs::path(link).parent_path());
  WriteFile(link, bytes);
  PublishRequest request = Request("a.txt", bytes, Source("a", bytes));
  ASSERT_TRUE(PublishToHfCache(request).ok);
  EXPECT_EQ(ReadLink(link), "../../blobs/" + request.etag);
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

TEST_F(HfCacheWriterTest, PublishMoveRenamesTheSourceAndCopyKeepsIt) {
  std::string bytes = PseudoRandomBytes(300000, 4);
  std::string source = Source("moved.safetensors", bytes);
  ASSERT_EQ(::chmod(source.c_str(), 0600), 0);
  ino_t source_inode = Lstat(source).st_ino;
  PublishRequest request = Request("model.safetensors", bytes, source);
  request.move_source = true;
  PublishResult moved = PublishToHfCache(request);
  ASSERT_TRUE(moved.ok) << moved.error;
  EXPECT_FALSE(Exists(source));
  struct stat blob = Lstat(repo() + "/blobs/" + request.etag);
  EXPECT_EQ(blob.st_ino, source_inode);  // renamed, not copied
  EXPECT_EQ(blob.st_mode & 07777, 0640u);
  EXPECT_EQ(ReadBytes(repo() + "/blobs/" + request.etag), bytes);

  std::string other = PseudoRandomBytes(300000, 5);
  std::string kept = Source("kept.safetensors", other);
  PublishRequest copy = Request("other.safetensors", other, kept);
  PublishResult copied = PublishToHfCache(copy);
  ASSERT_TRUE(copied.ok) << copied.error;
  EXPECT_EQ(ReadBytes(kept), other);
  EXPECT_NE(Lstat(repo() + "/blobs/" + copy.etag).st_ino, Lstat(kept).st_ino);
  EXPECT_EQ(ReadBytes(repo() + "/blobs/" + copy.etag), other);
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

TEST_F(HfCacheWriterTest, PublishMoveOfAnAlreadyPresentBlobConsumesTheSource) {
  std::string bytes = "same bytes";
  PublishRequest first = Request("a.txt", bytes, Source("first", bytes));
  ASSERT_TRUE(PublishToHfCache(first).ok);
  PublishRequest second = Request("a.txt", bytes, Source("second", bytes));
  second.move_source = true;
  PublishResult result = PublishToHfCache(second);
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_TRUE(result.already_present);
  EXPECT_FALSE(Exists(second.source_path));
  EXPECT_TRUE(Exists(first.source_path));
}

// The link cannot be made after the source was renamed into blobs/ (here the snapshot folder's
// name is taken by a file; on a full disk, the symlink's block): the source goes back where it
// was, with its inode (the caller still reads it), and no blob is left that nothing links to.
TEST_F(HfCacheWriterTest, PublishMoveWhoseLinkFailsPutsTheSourceBack) {
  std::string bytes = PseudoRandomBytes(100000, 8);
  std::string source = Source("moved.safetensors", bytes);
  ino_t source_inode = Lstat(source).st_ino;
  PublishRequest request = Request("model.safetensors", bytes, source);
  request.move_source = true;
  WriteFile(repo() + "/snapshots/" + request.commit, "not a folder");
  PublishResult result = PublishToHfCache(request);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find(repo() + "/snapshots/" + request.commit), std::string::npos)
      << result.error;
  ASSERT_TRUE(Exists(source)) << "the moved source was not put back";
  EXPECT_EQ(Lstat(source).st_ino, source_inode);
  EXPECT_EQ(ReadBytes(source), bytes);
  EXPECT_FALSE(Exists(repo() + "/blobs/" + request.etag));
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

TEST_F(HfCacheWriterTest, PublishMoveAcrossFilesystemsCopiesThenRemoves) {
  struct stat shm;
  if (::stat("/dev/shm", &shm) != 0 || ::access("/dev/shm", W_OK) != 0 ||
      shm.st_dev == Lstat(root_.path()).st_dev) {
    GTEST_SKIP() << "needs a writable /dev/shm on another filesystem";
  }
  std::string source = "/dev/shm/aprfs-publish-test-" + std::to_string(::getpid());
  std::string bytes = PseudoRandomBytes(200000, 6);
  WriteFile(source, bytes);
  PublishRequest request = Request("model.safetensors", bytes, source);
  request.move_source = true;
  PublishResult result = PublishToHfCache(request);
  ::unlink(source.c_str());  // in case the test fails
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_FALSE(result.already_present);
  EXPECT_EQ(ReadBytes(repo() + "/blobs/" + request.etag), bytes);
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

TEST_F(HfCacheWriterTest, PublishRefusesBadInput) {
  std::string bytes = "x";
  std::string source = Source("x", bytes);
  auto refused = [&](const PublishRequest& request, const std::string& expect_in_error) {
    PublishResult result = PublishToHfCache(request);
    EXPECT_FALSE(result.ok);
    EXPECT_NE(result.error.find(expect_in_error), std::string::npos)
        << "error: " << result.error << ", expected to mention: " << expect_in_error;
  };
  for (const std::string& path : std::vector<std::string>{"", "/etc/passwd", "../escape", "a/../../b", "..", "a//b", "a/",
                           "a\\b", "./a", "a/./b", std::string("a\0b", 3)}) {
    refused(Request(path, bytes, source), "path in repo");
  }
  for (std::string branch : {"", "../main", "/main", "refs//pr", "a\\b", "refs/pr/.."}) {
    refused(Request("x", bytes, source, branch), "branch");
  }
  for (std::string repo_id : {"", "a/b/c", "a--b/c", "../x", "org/", "/name", "org/na me",
                              "-org/name", "org/name."}) {
    PublishRequest request = Request("x", bytes, source);
    request.repo_id = repo_id;
    refused(request, "repo id");
  }
  for (const std::string& commit : std::vector<std::string>{"", Commit('A'), std::string(39, 'a'), std::string(41, 'a'),
                             std::string(40, 'g')}) {
    PublishRequest request = Request("x", bytes, source);
    request.commit = commit;
    refused(request, "commit");
  }
  for (const std::string& etag : std::vector<std::string>{"", std::string(63, 'a'), std::string(64, 'A'), "../../x"}) {
    PublishRequest request = Request("x", bytes, source);
    request.etag = etag;
    refused(request, "etag");
  }
  PublishRequest no_cache = Request("x", bytes, source);
  no_cache.cache_dir.clear();
  refused(no_cache, "cache");
  // Input is checked before anything is written.
  EXPECT_FALSE(Exists(cache()));
}

TEST_F(HfCacheWriterTest, PublishCleansUpWhenTheSourceIsShort) {
  std::string bytes = PseudoRandomBytes(70000, 7);
  std::string source = Source("short", bytes.substr(0, 50000));
  PublishRequest request = Request("model.safetensors", bytes, source);
  PublishResult result = PublishToHfCache(request);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find(source), std::string::npos) << result.error;
  EXPECT_TRUE(TempLeftovers(cache()).empty());
  EXPECT_FALSE(Exists(repo() + "/blobs/" + request.etag));
  EXPECT_FALSE(Exists(repo() + "/snapshots"));
  EXPECT_FALSE(Exists(repo() + "/refs"));
  EXPECT_EQ(Tree(repo() + "/blobs"), std::set<std::string>{});

  // Longer than announced is just as wrong.
  std::string longer = Source("long", bytes + "tail");
  result = PublishToHfCache(Request("model.safetensors", bytes, longer));
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find(longer), std::string::npos) << result.error;
  EXPECT_EQ(Tree(repo() + "/blobs"), std::set<std::string>{});

  // A move with the wrong size leaves the source where it was.
  PublishRequest move = Request("model.safetensors", bytes, source);
  move.move_source = true;
  result = PublishToHfCache(move);
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(ReadBytes(source), bytes.substr(0, 50000));
  EXPECT_TRUE(TempLeftovers(cache()).empty());

  // A missing source.
  result = PublishToHfCache(Request("model.safetensors", bytes, root_ / "missing"));
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find(root_ / "missing"), std::string::npos) << result.error;
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

// Holds an exclusive flock on `path` from a child process (as huggingface_hub would) until
// Release().
class ForeignLockHolder {
 public:
  explicit ForeignLockHolder(const std::string& path) {
    int ready[2];
    int release[2];
    if (::pipe(ready) != 0 || ::pipe(release) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(release[1]);
      int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
      char locked = (fd >= 0 && ::flock(fd, LOCK_EX) == 0) ? 1 : 0;
      (void)!::write(ready[1], &locked, 1);
      char byte;
      (void)!::read(release[0], &byte, 1);  // returns when the parent closes its end
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(release[0]);
    char locked = 0;
    locked_ = ::read(ready[0], &locked, 1) == 1 && locked == 1;
    ::close(ready[0]);
    release_ = release[1];
  }
  ~ForeignLockHolder() { Release(); }

  bool locked() const { return locked_; }
  void Release() {
    if (pid_ <= 0) return;
    ::close(release_);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
  bool locked_ = false;
};

TEST_F(HfCacheWriterTest, PublishTimesOutWhileAnotherProcessHoldsTheLock) {
  std::string bytes = PseudoRandomBytes(10000, 8);
  PublishRequest request = Request("model.safetensors", bytes, Source("a", bytes));
  request.lock_timeout = std::chrono::milliseconds(300);
  std::string lock = cache() + "/.locks/" + kFolder + "/" + request.etag + ".lock";
  fs::create_directories(fs::path(lock).parent_path());
  ForeignLockHolder holder(lock);
  ASSERT_TRUE(holder.locked());

  auto start = std::chrono::steady_clock::now();
  PublishResult result = PublishToHfCache(request);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("timed out"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find(lock), std::string::npos) << result.error;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(30)) << "it waited for the holder, who never lets go";
  EXPECT_FALSE(Exists(repo() + "/blobs/" + request.etag));
  EXPECT_FALSE(Exists(repo() + "/snapshots"));
  EXPECT_TRUE(TempLeftovers(cache()).empty());

  holder.Release();
  PublishResult after = PublishToHfCache(request);
  ASSERT_TRUE(after.ok) << after.error;
  EXPECT_TRUE(Exists(lock));  // never unlinked
}

TEST_F(HfCacheWriterTest, PublishWaitsForALockThatIsReleasedInTime) {
  std::string bytes = PseudoRandomBytes(10000, 9);
  PublishRequest request = Request("model.safetensors", bytes, Source("a", bytes));
  std::string lock = cache() + "/.locks/" + kFolder + "/" + request.etag + ".lock";
  fs::create_directories(fs::path(lock).parent_path());
  ForeignLockHolder holder(lock);
  ASSERT_TRUE(holder.locked());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    holder.Release();
  });
  PublishResult result = PublishToHfCache(request);
  releaser.join();
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_FALSE(result.already_present);
}

// Runs PublishToHfCache in a child once `start` is readable; the exit code says what happened.
enum PublishOutcome { kWrote = 0, kAlreadyPresent = 1, kFailed = 2 };

pid_t SpawnPublisher(const PublishRequest& request, const int start[2]) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(start[1]);  // or the read below would never see EOF
    char byte;
    (void)!::read(start[0], &byte, 1);
    PublishResult result = PublishToHfCache(request);
    ::_exit(!result.ok ? kFailed : result.already_present ? kAlreadyPresent : kWrote);
  }
  return pid;
}

int ExitCode(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST_F(HfCacheWriterTest, PublishFromTwoProcessesAtOnce) {
  for (uint32_t round = 0; round < 4; ++round) {
    std::string bytes = PseudoRandomBytes(3u << 20, 100 + round);
    PublishRequest request = Request("model.safetensors", bytes, Source("shared", bytes));
    int start[2];
    ASSERT_EQ(::pipe(start), 0);
    pid_t first = SpawnPublisher(request, start);
    pid_t second = SpawnPublisher(request, start);
    ASSERT_GT(first, 0);
    ASSERT_GT(second, 0);
    ::close(start[0]);
    ::close(start[1]);  // both children start now
    std::multiset<int> outcomes{ExitCode(first), ExitCode(second)};
    // The lock lets exactly one write; the other finds the blob in place.
    EXPECT_EQ(outcomes, (std::multiset<int>{kWrote, kAlreadyPresent})) << "round " << round;
    EXPECT_EQ(ReadBytes(repo() + "/blobs/" + request.etag), bytes);
    EXPECT_TRUE(TempLeftovers(cache()).empty());
  }
  EXPECT_EQ(Tree(repo() + "/blobs").size(), 4u);
}

TEST_F(HfCacheWriterTest, PublishFromManyThreadsAtOnce) {
  std::string bytes = PseudoRandomBytes(1u << 20, 11);
  std::string source = Source("shared", bytes);
  std::vector<PublishResult> results(6);
  std::vector<std::thread> threads;
  for (PublishResult& result : results) {
    threads.emplace_back([&] { result = PublishToHfCache(Request("model.safetensors", bytes, source)); });
  }
  for (std::thread& thread : threads) thread.join();
  int wrote = 0;
  for (const PublishResult& result : results) {
    EXPECT_TRUE(result.ok) << result.error;
    wrote += result.already_present ? 0 : 1;
  }
  EXPECT_EQ(wrote, 1);
  EXPECT_EQ(Tree(repo() + "/blobs").size(), 1u);
  EXPECT_TRUE(TempLeftovers(cache()).empty());
}

TEST_F(HfCacheWriterTest, PublishedModelIsReadByOurOwnCacheReader) {
  TestModel model;
  model.shards = {{MakeTensor("model.embed_tokens.weight", "F16", {16, 8}, 1)},
                  {MakeTensor("lm_head.weight", "F16", {16, 8}, 1)}};
  model.config_json = "{\"model_type\":\"llama\",\"hidden_size\":8}";
  std::string staging = root_ / "staging";
  WriteModel(staging, model);

  for (const std::string& repo_id : {std::string(kRepo), std::string("gpt2")}) {
    for (const auto& entry : fs::directory_iterator(staging)) {
      std::string bytes = ReadBytes(entry.path().string());
      std::string name = entry.path().filename().string();
      PublishRequest request = Request(name, bytes, entry.path().string());
      request.repo_id = repo_id;
      if (name.find(".safetensors") == std::string::npos || name.find(".json") != std::string::npos) {
        request.etag = GitBlobSha1(bytes);
      }
      PublishResult result = PublishToHfCache(request);
      ASSERT_TRUE(result.ok) << result.error;
    }
  }

  std::vector<CachedRepo> repos = ListCachedModels(cache());
  ASSERT_EQ(repos.size(), 2u);
  EXPECT_EQ(repos[0].repo_id, "gpt2");
  EXPECT_EQ(repos[1].repo_id, kRepo);
  for (const CachedRepo& cached : repos) {
    EXPECT_TRUE(cached.problem.empty()) << cached.problem;
    EXPECT_EQ(cached.commit, Commit('a'));
    EXPECT_EQ(cached.snapshot_dir, cached.folder + "/snapshots/" + Commit('a'));
  }
  EXPECT_EQ(repos[1].folder, repo());
  LoadedModel loaded = LoadLocalModel(repos[1].snapshot_dir, "name", "hf://org/name");
  EXPECT_EQ(loaded.sources.size(), 2u);
}

}  // namespace
}  // namespace aprfs
