// Names in the mount (design.md "Names in the mount"): HF cache repos as name.apr and
// org/name.apr, shared short names only under their orgs, sizes, modes, read-only (test 3).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCommitA = "1111111111111111111111111111111111111111";
constexpr const char* kCommitB = "2222222222222222222222222222222222222222";
constexpr const char* kCommitC = "3333333333333333333333333333333333333333";

// name -> size from `ls -ln`.
std::map<std::string, uint64_t> LsSizes(const std::string& dir) {
  std::map<std::string, uint64_t> sizes;
  ProcResult ls = RunCommand({"ls", "-ln", "--time-style=+%s", dir}, 30s);
  EXPECT_EQ(ls.exit_code, 0) << ls.Describe();
  std::istringstream lines(ls.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string mode, links, uid, gid, size, time, name;
    if (!(fields >> mode >> links >> uid >> gid >> size >> time >> name)) continue;
    if (mode[0] != '-') continue;  // files only
    sizes[name] = std::stoull(size);
  }
  return sizes;
}

class HfCacheTest : public MountTest {
 protected:
  std::string cache() const { return root() + "/hub"; }

  // Writes `model` to a staging folder and lays it out as an HF cache repo.
  void AddRepo(const std::string& repo_id, const char* commit, const tw::TestModel& model) {
    std::string stage = work_dir() + "/stage-" + std::to_string(stage_counter_++);
    tw::WriteModel(stage, model);
    tw::WriteHfCacheRepo(cache(), repo_id, commit, stage);
  }

 private:
  int stage_counter_ = 0;
};

TEST_F(HfCacheTest, ReposShowUnderShortAndOrgNamesAndSharedNamesOnlyUnderOrgs) {
  tw::TestModel uniq = tw::LlamaLikeModel(2, 2, true, 31);
  tw::TestModel dup_a = tw::LlamaLikeModel(2, 2, true, 32);
  tw::TestModel dup_b = tw::LlamaLikeModel(3, 1, true, 33);
  AddRepo("acme/uniq-model", kCommitA, uniq);
  AddRepo("acme/dup", kCommitB, dup_a);
  AddRepo("other/dup", kCommitC, dup_b);
  ProcResult made = RunMakeModel({"--hf-cache", cache(), "--repo", "pyorg/py-tiny", "--preset",
                                  "tiny", "--unaligned", "--shuffle-data"});
  ASSERT_EQ(made.exit_code, 0) << made.Describe();
  nlohmann::json summary = nlohmann::json::parse(made.out, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << made.Describe();
  const std::string py_snapshot = summary.value("dir", std::string());

  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache()}));

  EXPECT_EQ(ListDir(mountpoint()),
            (std::vector<std::string>{"acme", "other", "py-tiny.apr", "py-tiny.q4k.apr", "pyorg",
                                      "uniq-model.apr", "uniq-model.q4k.apr"}));
  EXPECT_EQ(ListDir(MP("acme")), (std::vector<std::string>{"dup.apr", "dup.q4k.apr", "uniq-model.apr",
                                                       "uniq-model.q4k.apr"}));
  EXPECT_EQ(ListDir(MP("other")), (std::vector<std::string>{"dup.apr", "dup.q4k.apr"}));
  EXPECT_EQ(ListDir(MP("pyorg")), (std::vector<std::string>{"py-tiny.apr", "py-tiny.q4k.apr"}));
  struct stat st;
  EXPECT_NE(stat(MP("dup.apr").c_str(), &st), 0) << "a shared short name must not be shown";
  EXPECT_EQ(errno, ENOENT);

  // Short and org names are the same file.
  ProcResult cmp = RunCommand({"cmp", MP("uniq-model.apr"), MP("acme/uniq-model.apr")}, 30s);
  EXPECT_EQ(cmp.exit_code, 0) << cmp.Describe();
  ProcResult cmp_py = RunCommand({"cmp", MP("py-tiny.apr"), MP("pyorg/py-tiny.apr")}, 30s);
  EXPECT_EQ(cmp_py.exit_code, 0) << cmp_py.Describe();

  // Each file serves its own repo's bytes.
  std::map<std::string, const tw::TestModel*> by_path = {{"uniq-model.apr", &uniq},
                                                         {"acme/uniq-model.apr", &uniq},
                                                         {"acme/dup.apr", &dup_a},
                                                         {"other/dup.apr", &dup_b}};
  for (const auto& [path, model] : by_path) {
    SCOPED_TRACE(path);
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP(path), &bytes, &error)) << error;
    AprLayout layout = ParseAprBytes(bytes);
    ExpectLayoutMatches(layout, ExpectedOf(*model));
    ExpectTensorBytes(layout, ExpectedOf(*model), bytes, "read()");
  }
  ProcResult check = RunAprcheck(MP("pyorg/py-tiny.apr"), py_snapshot);
  EXPECT_EQ(check.exit_code, 0) << check.Describe();

  // `ls -l` sizes are the real sizes (what a full read returns).
  for (const std::string dir : {"", "acme", "other", "pyorg"}) {
    std::string path = dir.empty() ? mountpoint() : MP(dir);
    std::map<std::string, uint64_t> sizes = LsSizes(path);
    EXPECT_FALSE(sizes.empty()) << path;
    for (const auto& [name, size] : sizes) {
      std::string bytes, error;
      ASSERT_TRUE(ReadWholeFile(path + "/" + name, &bytes, &error)) << error;
      EXPECT_EQ(size, bytes.size()) << "ls -l size of " << path << "/" << name;
      EXPECT_EQ(FileSize(path + "/" + name), bytes.size()) << "stat size of " << name;
    }
  }
}

TEST_F(HfCacheTest, FilesAreRegularReadOnlyAndCannotBeWritten) {
  tw::TestModel model = tw::LlamaLikeModel(2, 2, true, 41);
  AddRepo("acme/ro-model", kCommitA, model);
  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache()}));
  const std::string file = MP("ro-model.apr");
  std::string before, error;
  ASSERT_TRUE(ReadWholeFile(file, &before, &error)) << error;

  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0222, 0u) << "write bits set: mode " << std::oct << st.st_mode;
  EXPECT_NE(st.st_mode & 0444, 0u) << "not readable: mode " << std::oct << st.st_mode;
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), before.size());
  for (const std::string& dir : {mountpoint(), MP("acme")}) {
    ASSERT_EQ(stat(dir.c_str(), &st), 0) << dir;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << dir;
    EXPECT_EQ(st.st_mode & 0222, 0u) << dir << " is writable: mode " << std::oct << st.st_mode;
  }

  auto expect_refused = [](int result, const std::string& what) {
    int err = errno;
    EXPECT_EQ(result, -1) << what << " succeeded on a read-only mount";
    if (result == -1) {
      EXPECT_TRUE(err == EROFS || err == EACCES)
          << what << " failed with " << std::strerror(err) << ", want EROFS or EACCES";
    }
  };
  auto open_close = [](const std::string& path, int flags, mode_t mode = 0644) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd >= 0) ::close(fd);
    return fd >= 0 ? 0 : -1;
  };
  expect_refused(open_close(file, O_WRONLY), "open(O_WRONLY)");
  expect_refused(open_close(file, O_RDWR), "open(O_RDWR)");
  expect_refused(open_close(file, O_WRONLY | O_TRUNC), "open(O_WRONLY|O_TRUNC)");
  expect_refused(open_close(file, O_WRONLY | O_APPEND), "open(O_WRONLY|O_APPEND)");
  expect_refused(open_close(MP("new.apr"), O_WRONLY | O_CREAT), "create new.apr");
  expect_refused(open_close(MP("acme/new.apr"), O_WRONLY | O_CREAT), "create acme/new.apr");
  expect_refused(truncate(file.c_str(), 0), "truncate");
  expect_refused(unlink(file.c_str()), "unlink");
  expect_refused(rename(file.c_str(), MP("renamed.apr").c_str()), "rename");
  expect_refused(mkdir(MP("newdir").c_str(), 0755), "mkdir");
  expect_refused(rmdir(MP("acme").c_str()), "rmdir");
  expect_refused(symlink("ro-model.apr", MP("link.apr").c_str()), "symlink");
  expect_refused(link(file.c_str(), MP("hard.apr").c_str()), "link");
  expect_refused(chmod(file.c_str(), 0644), "chmod");

  std::string after;
  ASSERT_TRUE(ReadWholeFile(file, &after, &error)) << error;
  EXPECT_EQ(FirstDifference(before, after), std::nullopt) << "content changed";
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"acme", "ro-model.apr", "ro-model.q4k.apr"}));
  EXPECT_TRUE(DaemonAlive()) << DaemonState();
}

// An explicit --source folder wins a short name over an HF repo (catalog.h); the repo stays
// reachable under its org. A --source that is itself a model folder shows under its own name.
TEST_F(HfCacheTest, SourceFolderWinsShortNameAndModelFolderAsSource) {
  tw::TestModel hub = tw::LlamaLikeModel(2, 2, true, 51);
  tw::TestModel local = tw::LlamaLikeModel(1, 1, true, 52);
  tw::TestModel direct = tw::LlamaLikeModel(1, 2, true, 53);
  AddRepo("acme/shared", kCommitA, hub);
  tw::WriteModel(Model("shared"), local);
  tw::WriteModel(work_dir() + "/direct-model", direct);
  ASSERT_NO_FATAL_FAILURE(Mount(
      {"--hf-cache", cache(), "--source", models_dir(), "--source", work_dir() + "/direct-model"}));
  EXPECT_EQ(ListDir(mountpoint()),
            (std::vector<std::string>{"acme", "direct-model.apr", "direct-model.q4k.apr",
                                      "shared.apr", "shared.q4k.apr"}));
  std::map<std::string, const tw::TestModel*> by_path = {
      {"shared.apr", &local}, {"acme/shared.apr", &hub}, {"direct-model.apr", &direct}};
  for (const auto& [path, model] : by_path) {
    SCOPED_TRACE(path);
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP(path), &bytes, &error)) << error;
    AprLayout layout = ParseAprBytes(bytes);
    ExpectLayoutMatches(layout, ExpectedOf(*model));
    ExpectTensorBytes(layout, ExpectedOf(*model), bytes, "read()");
  }
}

// A new revision in the cache (refs/main moved to a new snapshot) is served under a new inode
// after the next lookup; a handle opened before keeps reading the revision it opened
// (design.md read rule 2: a model's revision is pinned when its plan is built).
TEST_F(HfCacheTest, NewRevisionIsServedUnderANewInodeWhileOldHandlesKeepTheOld) {
  tw::TestModel v1 = tw::LlamaLikeModel(2, 2, true, 71);
  tw::TestModel v2 = tw::LlamaLikeModel(2, 2, true, 72);
  AddRepo("acme/evolving", kCommitA, v1);
  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache()}));
  const std::string path = MP("evolving.apr");
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  Fd old_handle(path, O_RDONLY | O_DIRECT);
  ASSERT_TRUE(old_handle.ok()) << std::strerror(errno);
  AprLayout old_layout = ParseAprFile(path);
  ASSERT_NO_FATAL_FAILURE(ExpectLayoutMatches(old_layout, ExpectedOf(v1)));

  AddRepo("acme/evolving", kCommitB, v2);  // new blobs + snapshot, refs/main -> B
  std::this_thread::sleep_for(1200ms);
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0) << std::strerror(errno);
  EXPECT_NE(after.st_ino, before.st_ino) << "the new revision kept the old inode";
  for (const std::string name : {"evolving.apr", "acme/evolving.apr"}) {
    SCOPED_TRACE(name);
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP(name), &bytes, &error)) << error;
    AprLayout layout = ParseAprBytes(bytes);
    ExpectLayoutMatches(layout, ExpectedOf(v2));
    ExpectTensorBytes(layout, ExpectedOf(v2), bytes, "new revision");
  }
  // The old handle still reads revision A (O_DIRECT: straight from the daemon).
  std::string old_bytes(static_cast<size_t>(before.st_size), '\0');
  ASSERT_EQ(PreadFull(old_handle.get(), old_bytes.data(), old_bytes.size(), 0),
            static_cast<int64_t>(old_bytes.size()))
      << std::strerror(errno);
  ExpectTensorBytes(old_layout, ExpectedOf(v1), old_bytes, "handle opened on the old revision");
  EXPECT_TRUE(DaemonAlive()) << DaemonState();
}

// Models added to or removed from a source folder show up without a remount (the sources are
// rescanned at most a second apart); an open file of a removed model keeps working.
TEST_F(MountTest, ModelsAddedOrRemovedWhileMountedAppearAndDisappear) {
  tw::TestModel keep = tw::LlamaLikeModel(1, 1, true, 81);
  tw::TestModel going = tw::LlamaLikeModel(2, 2, true, 82);
  tw::TestModel added = tw::LlamaLikeModel(1, 2, true, 83);
  tw::WriteModel(Model("keep"), keep);
  tw::WriteModel(Model("going"), going);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"going.apr", "going.q4k.apr", "keep.apr",
                                                               "keep.q4k.apr"}));
  Fd going_handle(MP("going.apr"), O_RDONLY | O_DIRECT);
  ASSERT_TRUE(going_handle.ok());
  AprLayout going_layout = ParseAprFile(MP("going.apr"));

  const std::string odd_name = "added model \xC3\xBC";  // a space and a non-ASCII letter
  tw::WriteModel(Model(odd_name), added);
  fs::remove_all(Model("going"));
  auto deadline = std::chrono::steady_clock::now() + 30s;
  std::vector<std::string> want = {odd_name + ".apr", odd_name + ".q4k.apr", "keep.apr",
                                   "keep.q4k.apr"};
  while (ListDir(mountpoint()) != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(ListDir(mountpoint()), want) << "listing did not follow the source folder in 30 s";
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(MP(odd_name + ".apr"), &bytes, &error)) << error;
  ExpectTensorBytes(ParseAprBytes(bytes), ExpectedOf(added), bytes, "added model");
  // The kernel may answer from its positive entry for up to the entry timeout (a second).
  struct stat st;
  const auto gone_by = std::chrono::steady_clock::now() + 10s;
  while (stat(MP("going.apr").c_str(), &st) == 0 && std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_NE(stat(MP("going.apr").c_str(), &st), 0) << "a removed model is still shown";

  // The daemon still holds the removed model's shards open.
  std::string old_bytes(going_layout.file_size, '\0');
  ASSERT_EQ(PreadFull(going_handle.get(), old_bytes.data(), old_bytes.size(), 0),
            static_cast<int64_t>(old_bytes.size()))
      << std::strerror(errno);
  ExpectTensorBytes(going_layout, ExpectedOf(going), old_bytes, "handle of a removed model");
}

// Many models: readdir must return each exactly once across several kernel requests, and the
// sizes shown match the files. A repo without an org ("models--gpt2") shows only at the top.
TEST_F(HfCacheTest, LargeListingHasEveryModelExactlyOnce) {
  constexpr int kModels = 300;
  std::vector<std::string> want;
  for (int i = 0; i < kModels; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-with-a-longish-name-%03d", i);
    tw::TestModel m;
    m.layout = tw::TestModel::Layout::Single;
    m.shards = {{tw::MakeTensor("w", "F32", {static_cast<uint64_t>(i + 1)}, i)}};
    tw::WriteModel(Model(name), m);
    want.push_back(std::string(name) + ".apr");
    want.push_back(std::string(name) + ".q4k.apr");  // listed by default
  }
  AddRepo("gpt2", kCommitA, tw::LlamaLikeModel(1, 1, true, 93));
  want.push_back("gpt2.apr");
  want.push_back("gpt2.q4k.apr");
  std::sort(want.begin(), want.end());
  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache(), "--source", models_dir()}));
  std::vector<std::string> got;
  ProcResult ls = RunCommand({"ls", "-1", "-f", mountpoint()}, 60s);  // -f: raw readdir order
  ASSERT_EQ(ls.exit_code, 0) << ls.Describe();
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    if (line != "." && line != "..") got.push_back(line);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(ListDir(mountpoint()), want);
  std::map<std::string, uint64_t> sizes = LsSizes(mountpoint());
  EXPECT_EQ(sizes.size(), want.size());
  for (int i : {0, 150, 299}) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-with-a-longish-name-%03d.apr", i);
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP(name), &bytes, &error)) << error;
    EXPECT_EQ(sizes[name], bytes.size()) << name;
  }
}

// Cache repos that cannot even be tried (no refs/main, refs/main naming a missing snapshot) are
// not shown, are explained by `aprfs ls`, and do not disturb the good repo next to them.
TEST_F(HfCacheTest, ReposWithBrokenRefsAreHiddenAndReported) {
  tw::TestModel good = tw::LlamaLikeModel(1, 2, true, 94);
  AddRepo("acme/good", kCommitA, good);
  AddRepo("acme/noref", kCommitB, tw::LlamaLikeModel(1, 1, true, 95));
  fs::remove(cache() + "/models--acme--noref/refs/main");
  AddRepo("acme/badref", kCommitC, tw::LlamaLikeModel(1, 1, true, 96));
  tw::WriteFile(cache() + "/models--acme--badref/refs/main", std::string(40, 'd'));
  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache()}));
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"acme", "good.apr", "good.q4k.apr"}));
  EXPECT_EQ(ListDir(MP("acme")), (std::vector<std::string>{"good.apr", "good.q4k.apr"}));
  std::string bytes, error;
  ASSERT_TRUE(ReadWholeFile(MP("acme/good.apr"), &bytes, &error)) << error;
  ExpectTensorBytes(ParseAprBytes(bytes), ExpectedOf(good), bytes, "read()");

  ProcResult ls = RunAprfs({"ls", "--json", "--hf-cache", cache()}, 60s);
  ASSERT_EQ(ls.exit_code, 0) << ls.Describe();
  nlohmann::json models = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(models.is_array()) << ls.Describe();
  std::map<std::string, nlohmann::json> by_key;
  for (const nlohmann::json& m : models) by_key[m.value("key", std::string())] = m;
  ASSERT_TRUE(by_key.count("hf:acme/good")) << ls.out;
  EXPECT_EQ(by_key["hf:acme/good"].value("ok", false), true);
  for (const std::string key : {"hf:acme/noref", "hf:acme/badref"}) {
    ASSERT_TRUE(by_key.count(key)) << key << " not reported: " << ls.out;
    EXPECT_EQ(by_key[key].value("ok", true), false) << by_key[key].dump(2);
    EXPECT_NE(by_key[key].value("error", std::string()).find("refs/main"), std::string::npos)
        << by_key[key].dump(2);
  }
}

// readdir and lookup must agree: an org folder whose repos are all broken is not listed, so it
// must not be reachable by name either. (Regression test: failed before commit 43267a1.)
TEST_F(HfCacheTest, OrgFolderOfOnlyBrokenReposIsNeitherListedNorReachable) {
  tw::TestModel good = tw::LlamaLikeModel(1, 1, true, 91);
  tw::TestModel bad = tw::LlamaLikeModel(1, 2, true, 92);
  AddRepo("goodorg/fine", kCommitA, good);
  AddRepo("badorg/broken", kCommitB, bad);
  // Truncate the broken repo's first shard blob (through the snapshot symlink).
  std::string shard =
      cache() + "/models--badorg--broken/snapshots/" + kCommitB + "/" + bad.ShardNames()[0];
  ASSERT_EQ(truncate(fs::canonical(shard).c_str(), 100), 0);
  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache()}));
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"fine.apr", "fine.q4k.apr", "goodorg"}));
  struct stat st;
  errno = 0;
  EXPECT_NE(stat(MP("badorg").c_str(), &st), 0) << "'badorg' is not listed but can be looked up (a "
                                                << (S_ISDIR(st.st_mode) ? "folder" : "file") << ")";
  EXPECT_EQ(errno, ENOENT);
  EXPECT_NE(stat(MP("badorg/broken.apr").c_str(), &st), 0);
}

}  // namespace
}  // namespace aprfs_itest
