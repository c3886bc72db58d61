// Seeing what a mount does (issue 4): the hidden control folder `.aprfs/` (status.json and
// Prometheus metrics, fresh at every open), the user.aprfs.* extended attributes of each .apr,
// and `aprfs status`. Figures are checked against what the test itself read: O_DIRECT reads go
// straight to the daemon (exact byte counts), buffered re-reads come from the page cache (no
// count at all).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/integration/mount_fixture.h"
#include "tests/integration/prometheus_check.h"

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool ReadToEnd(const std::string& path, std::string* out, std::string* error, size_t piece) {
  Fd fd(path, O_RDONLY);
  if (!fd.ok()) return *error = std::strerror(errno), false;
  std::string buffer(piece, '\0');
  out->clear();
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return *error = std::strerror(errno), false;
    if (n == 0) return true;
    out->append(buffer.data(), static_cast<size_t>(n));
  }
}

class StatusTest : public MountTest {
 protected:
  std::string StatusPath() const { return MP(".aprfs/status.json"); }

  // The daemon's status.json, parsed (a gtest failure and an empty object when it is not JSON).
  json ReadStatus() {
    std::string text, error;
    if (!ReadToEnd(StatusPath(), &text, &error, 4096)) {
      ADD_FAILURE() << "cannot read status.json: " << error;
      return json::object();
    }
    json status = json::parse(text, nullptr, false);
    if (status.is_discarded() || !status.is_object()) {
      ADD_FAILURE() << "status.json is not a JSON object:\n" << text;
      return json::object();
    }
    return status;
  }

  // The entry of the model named `name` ("alpha.apr"); a gtest failure and null if absent.
  json Entry(const json& status, const std::string& name) {
    for (const json& model : status.value("models", json::array())) {
      if (model.value("name", json()) == name) return model;
    }
    ADD_FAILURE() << "no model named " << name << " in status.json:\n" << status.dump(2);
    return json();
  }

  uint64_t Figure(const std::string& model, const std::string& field) {
    json entry = Entry(ReadStatus(), model);
    return entry.is_object() ? entry.value(field, uint64_t{0}) : 0;
  }

  // The whole content of a file read in `piece`-byte read(2) calls, up to end of file. Not
  // ReadWholeFile: a control file may hold more than the size a stat saw (fresher figures).
  std::string Slurp(const std::string& path, size_t piece = 1 << 16) {
    std::string out, error;
    EXPECT_TRUE(ReadToEnd(path, &out, &error, piece)) << path << ": " << error;
    return out;
  }
};

// [offset, offset+length) with O_DIRECT: exactly one request reaches the daemon, whatever the
// page cache holds. Returns the byte count or -errno.
int64_t DirectRead(const std::string& path, uint64_t offset, uint64_t length) {
  Fd fd(path, O_RDONLY | O_DIRECT);
  if (!fd.ok()) return -errno;
  std::string buffer(length, '\0');
  ssize_t n = pread(fd.get(), buffer.data(), length, static_cast<off_t>(offset));
  return n < 0 ? -errno : n;
}

// getxattr(2) into a string: the value, or "" with *err set.
std::string GetXattr(const std::string& path, const std::string& name, int* err) {
  *err = 0;
  ssize_t size = getxattr(path.c_str(), name.c_str(), nullptr, 0);
  if (size < 0) {
    *err = errno;
    return "";
  }
  std::string value(static_cast<size_t>(size), '\0');
  ssize_t n = getxattr(path.c_str(), name.c_str(), value.data(), value.size());
  if (n < 0) {
    *err = errno;
    return "";
  }
  value.resize(static_cast<size_t>(n));
  return value;
}

// `getfattr -d -m - --absolute-names FILE` as name -> value (values are printed quoted).
std::map<std::string, std::string> Getfattr(const std::string& path) {
  ProcResult r = RunCommand({"getfattr", "-d", "-m", "-", "--absolute-names", path}, 30s);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  std::map<std::string, std::string> attrs;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    attrs[line.substr(0, eq)] = value;
  }
  return attrs;
}

std::string Canonical(const std::string& path) { return fs::weakly_canonical(path).string(); }

TEST_F(StatusTest, StatusJsonListsEveryModelAndCountsExactlyTheBytesServed) {
  tw::TestModel alpha = tw::LlamaLikeModel(2, 2, true, 401);
  tw::TestModel beta = tw::LlamaLikeModel(1, 1, true, 402);
  std::vector<std::string> alpha_shards = tw::WriteModel(Model("alpha"), alpha);
  tw::WriteModel(Model("beta"), beta);
  ASSERT_NO_FATAL_FAILURE(MountModels());

  // Before any lookup: both models known, neither built.
  json status = ReadStatus();
  EXPECT_EQ(status.value("mountpoint", ""), mountpoint());
  EXPECT_EQ(status.value("pid", int64_t{0}), daemon_pid());
  EXPECT_FALSE(status.value("version", "").empty());
  EXPECT_TRUE(status["hf_cache"].is_null()) << "mounted with --no-hf-cache";
  EXPECT_TRUE(status["cache_dir"].is_null()) << "no --repo models, no chunk cache";
  EXPECT_TRUE(status["cache_size_limit"].is_null());
  const std::string started = status.value("started_at", "");
  EXPECT_EQ(started.size(), 24u) << started;  // 2024-05-01T12:34:56.789Z
  EXPECT_EQ(started.back(), 'Z') << started;
  EXPECT_GE(status.value("uptime", -1.0), 0.0);
  ASSERT_EQ(status["models"].size(), 2u) << status.dump(2);
  for (const json& model : status["models"]) {
    EXPECT_EQ(model.value("state", ""), "not-yet-looked-up") << model.dump(2);
    EXPECT_TRUE(model["size"].is_null());
  }

  // A lookup builds alpha only.
  const std::string path = MP("alpha.apr");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << std::strerror(errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  status = ReadStatus();
  json a = Entry(status, "alpha.apr");
  ASSERT_TRUE(a.is_object());
  EXPECT_EQ(Entry(status, "beta.apr").value("state", ""), "not-yet-looked-up");
  EXPECT_EQ(a.value("state", ""), "ready");
  EXPECT_EQ(a["names"], json::array({"alpha.apr"}));
  const std::string dir = Canonical(Model("alpha"));
  EXPECT_EQ(a.value("key", ""), "dir:" + dir);
  EXPECT_EQ(a.value("kind", ""), "local");
  EXPECT_EQ(a.value("source", ""), "file://" + dir);
  EXPECT_TRUE(a["revision"].is_null()) << "a plain folder has no revision";
  EXPECT_TRUE(a["error"].is_null());
  EXPECT_EQ(a.value("size", uint64_t{0}), size);
  EXPECT_EQ(a.value("tensors", uint64_t{0}), ExpectedOf(alpha).size());
  ASSERT_EQ(a["shards"].size(), alpha_shards.size());
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < alpha_shards.size(); ++i) {
    const json& shard = a["shards"][i];
    const std::string file = dir + "/" + alpha_shards[i];
    EXPECT_EQ(shard.value("file", ""), alpha_shards[i]);
    EXPECT_EQ(shard.value("size", uint64_t{0}), FileSize(file));
    EXPECT_EQ(shard.value("cached_bytes", uint64_t{0}), FileSize(file)) << "local = all cached";
    EXPECT_EQ(shard.value("local_path", ""), file);
    EXPECT_TRUE(shard["sha256"].is_null()) << "no blob name to take it from";
    EXPECT_TRUE(shard["published"].is_null());
    shard_bytes += FileSize(file);
  }
  EXPECT_EQ(a.value("cached_bytes", uint64_t{0}), shard_bytes);
  for (const char* zero : {"bytes_read", "reads", "errors", "bytes_fetched", "requests",
                           "failed_requests", "in_flight"}) {
    EXPECT_EQ(a.value(zero, uint64_t{1}), 0u) << zero;
  }

  // A whole buffered read: the daemon serves every byte once.
  std::string whole, error;
  ASSERT_TRUE(ReadWholeFile(path, &whole, &error)) << error;
  ASSERT_EQ(whole.size(), size);
  EXPECT_EQ(Figure("alpha.apr", "bytes_read"), size);
  EXPECT_GT(Figure("alpha.apr", "reads"), 0u);
  // Again: read() is served with direct I/O (the shards' pages are the one cached copy), so the
  // daemon serves and counts every byte again.
  ASSERT_TRUE(ReadWholeFile(path, &whole, &error)) << error;
  const uint64_t served = 2 * size;
  EXPECT_EQ(Figure("alpha.apr", "bytes_read"), served);

  // O_DIRECT reads: exact counts, unaligned too.
  const uint64_t reads_before = Figure("alpha.apr", "reads");
  ASSERT_EQ(DirectRead(path, 1001, 3333), 3333);
  EXPECT_EQ(Figure("alpha.apr", "bytes_read"), served + 3333);
  EXPECT_EQ(Figure("alpha.apr", "reads"), reads_before + 1);
  ASSERT_EQ(DirectRead(path, size - 100, 10000), 100) << "a read across the end gets the tail";
  EXPECT_EQ(Figure("alpha.apr", "bytes_read"), served + 3433);
  EXPECT_EQ(Figure("alpha.apr", "errors"), 0u);

  json after = ReadStatus();
  EXPECT_EQ(Entry(after, "beta.apr").value("bytes_read", uint64_t{1}), 0u);
  EXPECT_EQ(Entry(after, "beta.apr").value("state", ""), "not-yet-looked-up");
  EXPECT_GE(after.value("uptime", 0.0), status.value("uptime", 0.0));

  // Other readers: cat, and Python's json module on the file itself.
  ProcResult cat = RunCommand({"cat", StatusPath()}, 30s);
  ASSERT_EQ(cat.exit_code, 0) << cat.Describe();
  json by_cat = json::parse(cat.out, nullptr, false);
  ASSERT_FALSE(by_cat.is_discarded()) << cat.out;
  EXPECT_EQ(Entry(by_cat, "alpha.apr").value("bytes_read", uint64_t{0}), served + 3433);
  ProcResult py =
      RunCommand({"python3", "-c",
                  "import json, sys\n"
                  "d = json.load(open(sys.argv[1]))\n"
                  "print(sorted(m['name'] for m in d['models']), d['models'][0]['state'] in "
                  "('ready', 'not-yet-looked-up'))",
                  StatusPath()},
                 30s);
  EXPECT_EQ(py.exit_code, 0) << py.Describe();
  EXPECT_EQ(py.out, "['alpha.apr', 'beta.apr'] True\n") << py.Describe();
}

TEST_F(StatusTest, ControlFolderIsHiddenReadOnlyAndFreshAtEveryOpen) {
  tw::WriteModel(Model("alpha"), tw::LlamaLikeModel(1, 1, true, 411));
  ASSERT_NO_FATAL_FAILURE(MountModels());

  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"alpha.apr", "alpha.q4k.apr"}))
      << ".aprfs must not be listed";
  EXPECT_EQ(ListDir(MP(".aprfs")), (std::vector<std::string>{"metrics", "status.json"}));
  ProcResult ls = RunCommand({"ls", "-a", mountpoint()}, 30s);
  EXPECT_EQ(ls.out.find(".aprfs"), std::string::npos) << ls.out;
  ProcResult ls_control = RunCommand({"ls", MP(".aprfs")}, 30s);
  EXPECT_EQ(ls_control.exit_code, 0) << ls_control.Describe();
  EXPECT_EQ(ls_control.out, "metrics\nstatus.json\n");

  struct stat st;
  ASSERT_EQ(stat(MP(".aprfs").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  for (const char* name : {"status.json", "metrics"}) {
    SCOPED_TRACE(name);
    const std::string file = MP(std::string(".aprfs/") + name);
    ASSERT_EQ(stat(file.c_str(), &st), 0) << std::strerror(errno);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0444u);
    EXPECT_GT(st.st_size, 0);
    EXPECT_LT(open(file.c_str(), O_WRONLY), 0);
    EXPECT_EQ(errno, EROFS);
  }
  EXPECT_LT(open(MP(".aprfs/new").c_str(), O_WRONLY | O_CREAT, 0644), 0);
  EXPECT_NE(stat(MP(".aprfs/nope").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);

  // One open is one snapshot; the next open shows the reads in between (nothing stale from the
  // page cache), and reading in tiny pieces gives the same document as one big read.
  Fd held(MP(".aprfs/status.json"), O_RDONLY);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(DirectRead(MP("alpha.apr"), 0, 4096), 4096);
  std::string held_text(1 << 20, '\0');
  int64_t n = PreadFull(held.get(), held_text.data(), held_text.size(), 0);
  ASSERT_GT(n, 0);
  held_text.resize(static_cast<size_t>(n));
  json held_status = json::parse(held_text, nullptr, false);
  ASSERT_FALSE(held_status.is_discarded()) << held_text;
  EXPECT_EQ(Entry(held_status, "alpha.apr").value("bytes_read", uint64_t{1}), 0u)
      << "the snapshot of an open must not change under its reader";
  std::string fresh = Slurp(StatusPath(), 7);
  json fresh_status = json::parse(fresh, nullptr, false);
  ASSERT_FALSE(fresh_status.is_discarded()) << fresh;
  EXPECT_EQ(Entry(fresh_status, "alpha.apr").value("bytes_read", uint64_t{0}), 4096u);
  ASSERT_EQ(DirectRead(MP("alpha.apr"), 0, 4096), 4096);
  EXPECT_EQ(Figure("alpha.apr", "bytes_read"), 8192u) << "a second open showed stale figures";
}

TEST_F(StatusTest, ControlFolderWorksWithoutAnyModel) {
  ASSERT_NO_FATAL_FAILURE(MountModels());
  EXPECT_EQ(ListDir(mountpoint()), std::vector<std::string>{});
  json status = ReadStatus();
  EXPECT_EQ(status["models"], json::array());
  PromParse metrics = ParsePrometheusText(Slurp(MP(".aprfs/metrics")));
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems);
}

TEST_F(StatusTest, XattrsOfAModelShowItsFigures) {
  tw::TestModel alpha = tw::LlamaLikeModel(2, 3, true, 421);
  tw::WriteModel(Model("alpha"), alpha);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("alpha.apr");
  const uint64_t size = FileSize(path);
  ASSERT_EQ(DirectRead(path, 64, 1000), 1000);

  std::map<std::string, std::string> attrs = Getfattr(path);
  const std::string dir = Canonical(Model("alpha"));
  uint64_t shard_bytes = 0;
  for (const std::string& shard : alpha.ShardNames()) shard_bytes += FileSize(dir + "/" + shard);
  EXPECT_EQ(attrs, (std::map<std::string, std::string>{
                       {"user.aprfs.key", "dir:" + dir},
                       {"user.aprfs.source", "file://" + dir},
                       {"user.aprfs.size", std::to_string(size)},
                       {"user.aprfs.shards", "3"},
                       {"user.aprfs.cached_bytes", std::to_string(shard_bytes)},
                       {"user.aprfs.bytes_read", "1000"},
                       {"user.aprfs.bytes_fetched", "0"},
                       // The plain view of a BF16 model: nothing is computed.
                       {"user.aprfs.view", "apr"},
                       {"user.aprfs.bytes_computed", "0"},
                       {"user.aprfs.encode_mb_per_s", "0.0"},
                       {"user.aprfs.cache_hits", "0"},
                       {"user.aprfs.cache_misses", "0"},
                   }));
  // Values are read at each call, not cached by the kernel.
  ASSERT_EQ(DirectRead(path, 0, 512), 512);
  int err = 0;
  EXPECT_EQ(GetXattr(path, "user.aprfs.bytes_read", &err), "1512");
  EXPECT_EQ(err, 0) << std::strerror(err);

  // The getxattr(2) protocol: size 0 asks the length, a short buffer is ERANGE, an unknown
  // name (or the revision of a plain folder) ENODATA.
  EXPECT_EQ(getxattr(path.c_str(), "user.aprfs.shards", nullptr, 0), 1);
  char small[2];
  EXPECT_EQ(getxattr(path.c_str(), "user.aprfs.source", small, sizeof(small)), -1);
  EXPECT_EQ(errno, ERANGE);
  EXPECT_EQ(getxattr(path.c_str(), "user.aprfs.nope", small, sizeof(small)), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(getxattr(path.c_str(), "user.aprfs.revision", small, sizeof(small)), -1);
  EXPECT_EQ(errno, ENODATA);
  ssize_t list_size = listxattr(path.c_str(), nullptr, 0);
  ASSERT_GT(list_size, 0);
  std::string names(static_cast<size_t>(list_size), '\0');
  EXPECT_EQ(listxattr(path.c_str(), names.data(), names.size()), list_size);
  EXPECT_EQ(listxattr(path.c_str(), small, sizeof(small)), -1);
  EXPECT_EQ(errno, ERANGE);
  EXPECT_EQ(names.back(), '\0');
  EXPECT_NE(names.find(std::string("user.aprfs.bytes_fetched\0", 25)), std::string::npos);
  // Read-only.
  EXPECT_EQ(setxattr(path.c_str(), "user.aprfs.source", "x", 1, 0), -1);
  EXPECT_TRUE(errno == EROFS || errno == ENOTSUP || errno == EPERM) << std::strerror(errno);
  EXPECT_EQ(removexattr(path.c_str(), "user.aprfs.source"), -1);
  // Folders have none.
  EXPECT_EQ(listxattr(mountpoint().c_str(), nullptr, 0), 0);
  EXPECT_EQ(getxattr(MP(".aprfs").c_str(), "user.aprfs.source", nullptr, 0), -1);
  EXPECT_EQ(errno, ENODATA);
}

// An HF cache repo with blobs named by their sha256, as huggingface_hub leaves them: status
// shows the commit and each shard's hash (taken from `sha256sum`, independent of aprfs).
TEST_F(StatusTest, HfCacheModelShowsCommitAndBlobHashes) {
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const std::string cache = root() + "/hub";
  const std::string repo = cache + "/models--acme--hashed";
  tw::TestModel model = tw::LlamaLikeModel(2, 2, true, 431);
  tw::WriteModel(work_dir() + "/stage", model);
  fs::create_directories(repo + "/blobs");
  fs::create_directories(repo + "/snapshots/" + commit);
  fs::create_directories(repo + "/refs");
  std::map<std::string, std::string> sha_of;
  for (const auto& entry : fs::directory_iterator(work_dir() + "/stage")) {
    ProcResult sum = RunCommand({"sha256sum", entry.path().string()}, 30s);
    ASSERT_EQ(sum.exit_code, 0) << sum.Describe();
    std::string sha = sum.out.substr(0, 64);
    fs::copy_file(entry.path(), repo + "/blobs/" + sha);
    fs::create_symlink("../../blobs/" + sha,
                       repo + "/snapshots/" + commit + "/" + entry.path().filename().string());
    sha_of[entry.path().filename().string()] = sha;
  }
  tw::WriteFile(repo + "/refs/main", commit);
  ASSERT_NO_FATAL_FAILURE(Mount({"--hf-cache", cache}));
  const std::string path = MP("hashed.apr");
  ASSERT_GT(FileSize(path), 0u);

  json status = ReadStatus();
  EXPECT_EQ(status.value("hf_cache", ""), cache);
  json m = Entry(status, "hashed.apr");
  ASSERT_TRUE(m.is_object());
  EXPECT_EQ(m["names"], json::array({"hashed.apr", "acme/hashed.apr"}));
  EXPECT_EQ(m.value("key", ""), "hf:acme/hashed");
  EXPECT_EQ(m.value("kind", ""), "hf-cache");
  EXPECT_EQ(m.value("source", ""), "hf://acme/hashed");
  EXPECT_EQ(m.value("revision", ""), commit);
  ASSERT_EQ(m["shards"].size(), 2u);
  for (const json& shard : m["shards"]) {
    const std::string file = shard.value("file", "");
    EXPECT_EQ(shard.value("sha256", ""), sha_of[file]) << file;
    EXPECT_EQ(shard.value("local_path", ""), repo + "/snapshots/" + commit + "/" + file);
  }
  int err = 0;
  EXPECT_EQ(GetXattr(path, "user.aprfs.revision", &err), commit) << std::strerror(err);
  EXPECT_EQ(GetXattr(MP("acme/hashed.apr"), "user.aprfs.source", &err), "hf://acme/hashed");
}

TEST_F(StatusTest, MetricsAreStrictPrometheusTextWithTheSameFigures) {
  tw::WriteModel(Model("alpha"), tw::LlamaLikeModel(2, 2, true, 441));
  tw::WriteModel(Model("beta"), tw::LlamaLikeModel(1, 1, true, 442));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("alpha.apr");
  const uint64_t size = FileSize(path);
  ASSERT_EQ(DirectRead(path, 10, 2000), 2000);

  const std::string text = Slurp(MP(".aprfs/metrics"), 100);
  PromParse metrics = ParsePrometheusText(text);
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems) << "\n"
                                        << text;
  const std::map<std::string, std::string> alpha = {{"model", "alpha.apr"}};
  const std::map<std::string, std::string> beta = {{"model", "beta.apr"}};
  EXPECT_EQ(metrics.Value("aprfs_read_bytes_total", alpha), 2000);
  EXPECT_EQ(metrics.Value("aprfs_reads_total", alpha), 1);
  EXPECT_EQ(metrics.Value("aprfs_read_errors_total", alpha), 0);
  EXPECT_EQ(metrics.Value("aprfs_model_size_bytes", alpha), static_cast<double>(size));
  EXPECT_EQ(metrics.Value("aprfs_model_ready", alpha), 1);
  EXPECT_EQ(metrics.Value("aprfs_model_ready", beta), 0) << "beta was never looked up";
  EXPECT_EQ(metrics.Value("aprfs_read_bytes_total", beta), 0);
  EXPECT_EQ(metrics.types["aprfs_read_bytes_total"], "counter");
  EXPECT_EQ(metrics.types["aprfs_fetches_in_flight"], "gauge");
  bool info = false;
  for (const PromSample& s : metrics.samples) {
    if (s.name == "aprfs_model_info" && s.labels.at("model") == "alpha.apr") {
      info = true;
      EXPECT_EQ(s.labels.at("kind"), "local");
      EXPECT_EQ(s.labels.at("source"), "file://" + Canonical(Model("alpha")));
    }
  }
  EXPECT_TRUE(info) << text;
  // The same figures as status.json, read after the same reads.
  EXPECT_EQ(Figure("alpha.apr", "bytes_read"), 2000u);

  // The checker itself rejects what it must (so a pass above means something).
  for (const char* bad : {
           "x_total 1\n",                                               // no TYPE/HELP
           "# HELP x_total h\n# TYPE x_total counter\nx_total -1\n",    // negative counter
           "# HELP x h\n# TYPE x counter\nx 1\n",                       // counter not *_total
           "# HELP x h\n# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n",  // series twice
           "# HELP x h\n# TYPE x gauge\nx{a=\"\\q\"} 1\n",              // bad escape
           "# HELP x h\n# TYPE x gauge\nx 1",                           // no final newline
           "# HELP x h\n# TYPE x gauge\nx 1\n# HELP y h\n# TYPE y gauge\ny 1\nx 2\n",  // split
       }) {
    EXPECT_FALSE(ParsePrometheusText(bad).problems.empty()) << "accepted:\n" << bad;
  }
}

TEST_F(StatusTest, ReadErrorsAreCountedAsTheyAreReturned) {
  tw::TestModel model = BulkModel(2, 1 << 20, 451);
  std::vector<std::string> shards = tw::WriteModel(Model("mut"), model);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("mut.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  Fd fd(path, O_RDONLY | O_DIRECT);  // stays on this build of the model
  ASSERT_TRUE(fd.ok()) << std::strerror(errno);
  // Change the second shard in place (same size, new mtime): its reads fail from now on.
  const std::string shard = Model("mut") + "/" + shards[1];
  {
    Fd w(shard, O_WRONLY);
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(pwrite(w.get(), "\xff", 1, static_cast<off_t>(FileSize(shard) - 1)), 1);
    struct timespec later[2] = {{0, UTIME_OMIT}, {time(nullptr) + 100, 0}};
    ASSERT_EQ(futimens(w.get(), later), 0);
  }
  const AprEntry* victim = layout.Find(model.shards[1].front().name);
  ASSERT_NE(victim, nullptr);
  const uint64_t read_before = Figure("mut.apr", "bytes_read");  // the parse above read some
  char buffer[4096];
  for (int i = 0; i < 3; ++i) {
    ssize_t n = pread(fd.get(), buffer, sizeof(buffer),
                      static_cast<off_t>(layout.data_offset + victim->offset));
    EXPECT_EQ(n, -1);
    EXPECT_EQ(errno, EIO);
  }
  EXPECT_EQ(pread(fd.get(), buffer, 100, 0), 100) << "the prefix still reads";
  json m = Entry(ReadStatus(), "mut.apr");
  EXPECT_EQ(m.value("errors", uint64_t{0}), 3u) << m.dump(2);
  EXPECT_EQ(m.value("bytes_read", uint64_t{0}), read_before + 100)
      << "only the successful read adds bytes";
  PromParse metrics = ParsePrometheusText(Slurp(MP(".aprfs/metrics")));
  EXPECT_EQ(metrics.Value("aprfs_read_errors_total", {{"model", "mut.apr"}}), 3);
}

TEST_F(StatusTest, StatusCommandPrintsTablesAndJsonAndRefusesOtherFolders) {
  tw::TestModel alpha = tw::LlamaLikeModel(2, 2, true, 461);
  tw::WriteModel(Model("alpha"), alpha);
  tw::WriteModel(Model("beta"), tw::LlamaLikeModel(1, 1, true, 462));
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string path = MP("alpha.apr");
  ASSERT_EQ(DirectRead(path, 0, 2048), 2048);

  ProcResult table = RunAprfs({"status", mountpoint()}, 30s);
  ASSERT_EQ(table.exit_code, 0) << table.Describe();
  std::istringstream lines(table.out);
  std::string header, columns, alpha_row, beta_row;
  std::getline(lines, header);
  std::getline(lines, columns);
  std::getline(lines, alpha_row);
  std::getline(lines, beta_row);
  EXPECT_NE(header.find(mountpoint()), std::string::npos) << table.out;
  EXPECT_NE(header.find("pid " + std::to_string(daemon_pid())), std::string::npos) << table.out;
  EXPECT_EQ(columns.rfind("MODEL", 0), 0u) << table.out;
  for (const char* column :
       {"SOURCE", "REV", "SIZE", "CACHED", "READ", "FETCHED", "ERRORS", "IN-FLIGHT"}) {
    EXPECT_NE(columns.find(column), std::string::npos) << column << "\n" << table.out;
  }
  std::vector<std::string> fields;
  {
    std::istringstream row(alpha_row);
    for (std::string f; row >> f;) fields.push_back(f);
  }
  // alpha.apr file://... - ready SIZE UNIT 100% 2.0 KiB 0 B 0 0
  ASSERT_EQ(fields.size(), 13u) << alpha_row;
  EXPECT_EQ(fields[0], "alpha.apr");
  EXPECT_EQ(fields[1], "file://" + Canonical(Model("alpha")));
  EXPECT_EQ(fields[2], "-");
  EXPECT_EQ(fields[3], "ready");
  EXPECT_EQ(fields[6], "100%");
  EXPECT_EQ(fields[7] + " " + fields[8], "2.0 KiB");
  EXPECT_EQ(fields[9] + " " + fields[10], "0 B");
  EXPECT_EQ(fields[11], "0");
  EXPECT_EQ(fields[12], "0");
  EXPECT_EQ(beta_row.rfind("beta.apr", 0), 0u) << table.out;
  EXPECT_NE(beta_row.find("not-yet-looked-up"), std::string::npos) << table.out;

  ProcResult raw = RunAprfs({"status", "--json", mountpoint()}, 30s);
  ASSERT_EQ(raw.exit_code, 0) << raw.Describe();
  json parsed = json::parse(raw.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << raw.out;
  EXPECT_EQ(parsed.value("mountpoint", ""), mountpoint());
  EXPECT_EQ(Entry(parsed, "alpha.apr").value("bytes_read", uint64_t{0}), 2048u);

  // Without a mountpoint: every aprfs mount of the machine, ours among them.
  // Another test's daemon may be gone (killed on purpose) while this runs: that mount is
  // reported and the exit code says so, but ours must be there either way.
  ProcResult all = RunAprfs({"status"}, 30s);
  if (all.exit_code != 0) {
    EXPECT_EQ(all.exit_code, 1) << all.Describe();
    EXPECT_EQ(all.err.find(mountpoint()), std::string::npos) << all.Describe();
  }
  EXPECT_NE(all.out.find(" at " + mountpoint() + " "), std::string::npos) << all.Describe();
  ProcResult all_json = RunAprfs({"status", "--json"}, 30s);
  json list = json::parse(all_json.out, nullptr, false);
  ASSERT_TRUE(list.is_array()) << all_json.Describe();
  bool found = false;
  for (const json& doc : list) found = found || doc.value("mountpoint", "") == mountpoint();
  EXPECT_TRUE(found) << all_json.out;

  // A folder that is not an aprfs mount, and one that does not exist.
  ProcResult other = RunAprfs({"status", root()}, 30s);
  EXPECT_EQ(other.exit_code, 1) << other.Describe();
  EXPECT_NE(other.err.find("not an aprfs mount"), std::string::npos) << other.Describe();
  EXPECT_TRUE(other.out.empty()) << other.Describe();
  ProcResult proc = RunAprfs({"status", "/proc"}, 30s);
  EXPECT_EQ(proc.exit_code, 1) << proc.Describe();
  EXPECT_NE(proc.err.find("it is proc"), std::string::npos) << proc.Describe();
}

}  // namespace
}  // namespace aprfs_itest
