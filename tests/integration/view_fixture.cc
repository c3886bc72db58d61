#include "tests/integration/view_fixture.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

// apr_views.py output by (make_model args, model name, view): the same for every test of a run.
std::mutex g_references_mu;
std::map<std::string, ViewReference> g_references;

std::string ReferenceKey(const std::vector<std::string>& args, const std::string& name,
                         const std::string& view) {
  std::string key;
  for (const std::string& arg : args) key += arg + '\x1f';
  return key + '\x1e' + name + '\x1e' + view;
}

uint64_t Fnv1a(std::string_view text, uint64_t hash = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// apr_views.py takes seconds per view, and every test is a process of its own: its answers are
// also kept on disk, for the other tests of the run and the next runs, under a hash of all they
// depend on: the key above and the sources of make_model.py and apr_views.py. Only answers
// (bytes, or a refusal) are kept, never a failure to run.
std::string ReferenceCachePath(const std::string& key) {
  static const uint64_t tools =
      Fnv1a(SlurpOrEmpty(ToolsDir() + "/make_model.py"),
            Fnv1a(SlurpOrEmpty(ToolsDir() + "/apr_views.py"),
                  Fnv1a(SlurpOrEmpty(ToolsDir() + "/merged_safetensors.py"))));
  const char* env = std::getenv("APRFS_VIEW_REFERENCE_CACHE");
  const std::string dir =
      env && *env ? env : "/tmp/aprfs-view-references-" + std::to_string(::getuid());
  char name[40];
  std::snprintf(name, sizeof name, "%016llx.ref",
                static_cast<unsigned long long>(Fnv1a(key, tools)));
  return dir + "/" + name;
}

// The file: "EXIT_CODE MESSAGE_SIZE\n", the message, the bytes.
std::optional<ViewReference> LoadCachedReference(const std::string& path) {
  const std::string text = SlurpOrEmpty(path);
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  ViewReference ref;
  size_t message_size = 0;
  if (std::sscanf(text.c_str(), "%d %zu", &ref.exit_code, &message_size) != 2 ||
      newline + 1 + message_size > text.size()) {
    return std::nullopt;
  }
  ref.message = text.substr(newline + 1, message_size);
  ref.bytes = text.substr(newline + 1 + message_size);
  return ref;
}

void StoreCachedReference(const std::string& path, const ViewReference& ref) {
  if (ref.exit_code != 0 && ref.exit_code != 3) return;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string temp = path + "." + std::to_string(::getpid()) + ".tmp";
  tw::WriteFile(temp, std::to_string(ref.exit_code) + " " + std::to_string(ref.message.size()) +
                          "\n" + ref.message + ref.bytes);
  fs::rename(temp, path, ec);  // atomic: a reader sees the whole file or none
  if (ec) fs::remove(temp, ec);
}

}  // namespace

ViewReference RunReferenceWriter(const std::string& model_dir, const std::string& name,
                                 const std::string& view, const std::string& out_path) {
  ProcResult r = view == "safetensors"
                     ? RunCommand({"python3", ToolsDir() + "/merged_safetensors.py", model_dir,
                                   "-o", out_path},
                                  120s)
                     : RunCommand({"python3", ToolsDir() + "/apr_views.py", model_dir, "--view",
                                   view, "--name", name + "." + view, "-o", out_path},
                                  120s);
  ViewReference ref;
  ref.exit_code = r.exit_code;
  ref.message = r.exit_code == 0 || r.exit_code == 3 ? r.err : r.Describe();
  if (r.exit_code == 0) ref.bytes = SlurpOrEmpty(out_path);
  std::error_code ec;
  fs::remove(out_path, ec);
  return ref;
}

namespace {

std::string Where(uint64_t offset, uint64_t length) {
  return std::to_string(length) + " bytes at " + std::to_string(offset);
}

// Compares got with want[offset, offset + got.size()); a description of the first difference.
std::optional<std::string> RangeDiffers(const std::string& want, uint64_t offset,
                                        const char* got, uint64_t length) {
  if (std::memcmp(want.data() + offset, got, length) == 0) return std::nullopt;
  for (uint64_t i = 0; i < length; ++i) {
    if (want[offset + i] != got[i]) {
      return "first difference at file offset " + std::to_string(offset + i);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string ViewFileName(const std::string& model, const std::string& view) {
  if (view == "safetensors") return model + ".safetensors";
  if (view == "gguf") return model + ".gguf";
  if (view.rfind("gguf-", 0) == 0) {  // gguf-f16 -> NAME.F16.gguf
    std::string type = view.substr(5);
    for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return model + "." + type + ".gguf";
  }
  return view == "apr" ? model + ".apr" : model + "." + view + ".apr";
}

bool ReadDirect(const std::string& path, std::string* out, std::string* error, size_t piece) {
  Fd fd(path, O_RDONLY | O_DIRECT);
  if (!fd.ok()) return *error = "open O_DIRECT " + path + ": " + std::strerror(errno), false;
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return *error = std::strerror(errno), false;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  out->assign(size, '\0');
  for (uint64_t at = 0; at < size; at += piece) {
    const uint64_t n = std::min<uint64_t>(piece, size - at);
    int64_t got = PreadFull(fd.get(), out->data() + at, n, at);
    if (got != static_cast<int64_t>(n)) {
      *error = "O_DIRECT pread of " + Where(at, n) + ": " +
               (got < 0 ? std::strerror(static_cast<int>(-got)) : std::to_string(got) + " bytes");
      return false;
    }
  }
  return true;
}

void ExpectViewBytes(const std::string& path, const std::string& want) {
  SCOPED_TRACE("mounted view " + path);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << std::strerror(errno);
  ASSERT_EQ(static_cast<uint64_t>(st.st_size), want.size()) << "size";
  const uint64_t size = want.size();

  // read(2) of the whole file, then in odd-sized pieces, each from a cold page cache.
  for (size_t piece : {size_t{1} << 20, size_t{4093}}) {
    DropPageCache(path);
    std::string got, error;
    ASSERT_TRUE(ReadWholeFile(path, &got, &error, piece)) << error;
    EXPECT_EQ(FirstDifference(got, want), std::nullopt) << "read() in pieces of " << piece;
  }

  // O_DIRECT: the daemon sees these exact offsets and lengths. Sweeps whose requests start at
  // odd offsets, then random ranges, then reads at and across the end.
  Fd fd(path, O_RDONLY | O_DIRECT);
  if (!fd.ok() && errno == EINVAL) {
    std::fprintf(stderr, "note: O_DIRECT not supported on this mount; skipped\n");
  } else {
    ASSERT_TRUE(fd.ok()) << "open O_DIRECT: " << std::strerror(errno);
    for (uint64_t piece : {uint64_t{12289}, uint64_t{65537}, uint64_t{1048573}}) {
      std::string got(size, '\0');
      uint64_t at = 0;
      for (uint64_t n = 7; at < size; at += n, n = piece) {  // a first 7-byte request
        n = std::min(n, size - at);
        int64_t r = PreadFull(fd.get(), got.data() + at, n, at);
        ASSERT_EQ(r, static_cast<int64_t>(n)) << "O_DIRECT pread of " << Where(at, n);
      }
      EXPECT_EQ(FirstDifference(got, want), std::nullopt) << "O_DIRECT sweep, pieces of " << piece;
    }
    std::mt19937_64 rng(size);
    std::string buffer;
    for (int i = 0; i < 64; ++i) {
      const uint64_t offset = rng() % size;
      const uint64_t length = std::min<uint64_t>(1 + rng() % 200000, size - offset);
      buffer.assign(length, '\0');
      int64_t r = PreadFull(fd.get(), buffer.data(), length, offset);
      ASSERT_EQ(r, static_cast<int64_t>(length)) << "O_DIRECT pread of " << Where(offset, length);
      EXPECT_EQ(RangeDiffers(want, offset, buffer.data(), length), std::nullopt)
          << "O_DIRECT pread of " << Where(offset, length);
    }
    char tail[16];
    EXPECT_EQ(::pread(fd.get(), tail, sizeof tail, static_cast<off_t>(size)), 0) << "at the end";
    EXPECT_EQ(::pread(fd.get(), tail, sizeof tail, static_cast<off_t>(size - 3)), 3)
        << "across the end";
    EXPECT_EQ(std::memcmp(tail, want.data() + size - 3, 3), 0) << "the footer's last bytes";
  }

  // mmap from a cold page cache, pages touched in a random order.
  DropPageCache(path);
  Child child = StartChild([&] { return CompareMappedPages(path, want, size); });
  ProcResult r = WaitChild(child, 60s);
  EXPECT_EQ(r.exit_code, 0) << "mmap reader: " << r.Describe();
}

int CompareMappedPages(const std::string& path, const std::string& want, uint64_t seed,
                       int rounds) {
  const uint64_t size = want.size();
  Fd fd(path, O_RDONLY);
  if (!fd.ok()) return 2;
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return 3;
  const char* base = static_cast<const char*>(map);
  std::vector<uint64_t> pages((size + 4095) / 4096);
  for (uint64_t p = 0; p < pages.size(); ++p) pages[p] = p;
  std::mt19937_64 rng(seed);
  int bad = 0;
  for (int round = 0; round < rounds && !bad; ++round) {
    std::shuffle(pages.begin(), pages.end(), rng);
    for (uint64_t p : pages) {
      const uint64_t at = p * 4096, n = std::min<uint64_t>(4096, size - at);
      if (std::memcmp(base + at, want.data() + at, n) != 0) {
        dprintf(2, "%s, round %d: the mapped page at %llu differs\n", path.c_str(), round,
                static_cast<unsigned long long>(at));
        if (++bad > 5) break;
      }
    }
    madvise(map, size, MADV_DONTNEED);
    posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  munmap(map, size);
  return bad ? 1 : 0;
}

std::vector<std::pair<std::string, std::string>> EveryQuantizedView(
    const std::vector<std::string>& models) {
  std::vector<std::pair<std::string, std::string>> all;
  for (const std::string& model : models) {
    for (const std::string& view : kQuantizedViews) all.push_back({model, view});
  }
  return all;
}

uint64_t DiskUsage(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return bytes;
}

tw::TestModel LargeFp8Model(uint64_t rows, uint64_t cols) {
  const std::string weight = "model.layers.0.mlp.down_proj.weight";
  tw::TestTensor fp8{weight, "F8_E4M3", {rows, cols}, tw::PseudoRandomBytes(rows * cols, 8)};
  for (char& code : fp8.bytes) {
    if ((code & 0x7F) == 0x7F) code = 0x3C;  // E4M3 has NaN codes only, never an Inf: none
  }
  const uint64_t block_rows = (rows + 127) / 128, block_cols = (cols + 127) / 128;
  tw::TestTensor scales{weight + "_scale_inv", "F32", {block_rows, block_cols}, ""};
  for (uint64_t i = 0; i < block_rows * block_cols; ++i) {
    float scale = 1e-3f * static_cast<float>(1 + i % 7);
    scales.bytes.append(reinterpret_cast<const char*>(&scale), sizeof scale);
  }
  tw::TestModel model;
  model.shards = {{tw::MakeTensor("model.embed_tokens.weight", "BF16", {64, 32}, 8), fp8},
                  {scales, tw::MakeTensor("model.norm.weight", "F32", {32}, 8)}};
  return model;
}

// ----- ViewTest -------------------------------------------------------------------------------

void ViewTest::MakeModel(const std::string& name, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {Model(name)};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r = RunMakeModel(argv);
  ASSERT_EQ(r.exit_code, 0) << "make_model.py " << name << ": " << r.Describe();
  made_[name] = args;
}

void ViewTest::PrepareReferences(const std::vector<std::pair<std::string, std::string>>& wanted) {
  struct Job {
    std::string key, name, view;
    std::vector<std::string> args;
    ViewReference result;
  };
  std::vector<Job> jobs;
  {
    std::lock_guard lock(g_references_mu);
    for (const auto& [name, view] : wanted) {
      auto made = made_.find(name);
      if (made == made_.end()) {
        ADD_FAILURE() << "no model " << name << " made by MakeModel";
        continue;
      }
      std::string key = ReferenceKey(made->second, name, view);
      if (!g_references.count(key)) jobs.push_back({key, name, view, made->second, {}});
    }
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      Job& job = jobs[i];
      const std::string cached = ReferenceCachePath(job.key);
      if (std::optional<ViewReference> ref = LoadCachedReference(cached)) {
        job.result = std::move(*ref);
        continue;
      }
      job.result = RunReferenceWriter(Model(job.name), job.name, job.view,
                               work_dir() + "/" + job.name + "." + job.view + ".reference.apr");
      StoreCachedReference(cached, job.result);
    }
  };
  std::thread helper(work);
  work();
  helper.join();
  std::lock_guard lock(g_references_mu);
  for (Job& job : jobs) g_references[job.key] = std::move(job.result);
}

const ViewReference& ViewTest::Reference(const std::string& name, const std::string& view) {
  PrepareReferences({{name, view}});
  static const ViewReference kMissing;
  auto made = made_.find(name);
  if (made == made_.end()) return kMissing;
  std::lock_guard lock(g_references_mu);
  return g_references.at(ReferenceKey(made->second, name, view));
}

std::string ViewTest::ExpectedBytes(const std::string& name, const std::string& view) {
  const ViewReference& ref = Reference(name, view);
  EXPECT_EQ(ref.exit_code, 0) << "apr_views.py " << name << " --view " << view << ": "
                              << ref.message;
  return ref.bytes;
}

std::string ViewTest::LargeFp8Reference() {
  // Not kept across tests: the .apr's metadata names the model's folder, which is the test's.
  tw::WriteModel(Model("big"), LargeFp8Model(2000, 4100));
  Mount({"--no-hf-cache", "--source", models_dir(), "--cache-dir", root() + "/reference-cache",
         "--no-view-cache"});
  if (HasFatalFailure()) return "";
  std::string bytes, error;
  EXPECT_TRUE(ReadDirect(MP("big.apr"), &bytes, &error)) << error;
  UnmountCleanly();
  const std::string copy = work_dir() + "/big.apr";
  tw::WriteFile(copy, bytes);
  ProcResult check = RunAprcheck(copy, Model("big"));
  EXPECT_EQ(check.exit_code, 0) << "the large FP8 model's .apr: " << check.Describe();
  std::error_code ec;
  fs::remove(copy, ec);
  EXPECT_GT(bytes.size(), 3u * (4u << 20)) << "meant to span four computed chunks";
  return bytes;
}

void ViewTest::MountViews(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--no-hf-cache", "--source", models_dir(), "--cache-dir",
                                   CacheDir()};
  args.insert(args.end(), extra.begin(), extra.end());
  Mount(args);
}

void ViewTest::UnmountCleanly() {
  std::string problem;
  EXPECT_TRUE(Unmount(&problem)) << problem;
}

namespace {

// Bytes some view computed and the background writer has not stored yet.
uint64_t PendingBytes(const nlohmann::json& status) {
  uint64_t pending = 0;
  for (const nlohmann::json& model : status.value("models", nlohmann::json::array())) {
    for (const nlohmann::json& view : model.value("views", nlohmann::json::array())) {
      pending += view.value("cache_pending_bytes", uint64_t{0});
    }
  }
  return pending;
}

}  // namespace

nlohmann::json ViewTest::Status(const std::string& mount) {
  // Computed chunks are stored in the background: figures are compared once they settled.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (true) {
    const std::string text =
        SlurpOrEmpty((mount.empty() ? mountpoint() : mount) + "/.aprfs/status.json");
    nlohmann::json status = nlohmann::json::parse(text, nullptr, false);
    if (status.is_discarded() || !status.is_object()) {
      ADD_FAILURE() << "status.json is not a JSON object:\n" << text;
      return nlohmann::json::object();
    }
    if (PendingBytes(status) == 0) return status;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "computed chunks still not stored after 60 s:\n" << status.dump(2);
      return status;
    }
    std::this_thread::sleep_for(20ms);
  }
}

nlohmann::json ViewTest::ViewStatus(const std::string& model, const std::string& view) {
  nlohmann::json status = Status();
  for (const nlohmann::json& entry : status.value("models", nlohmann::json::array())) {
    if (entry.value("name", nlohmann::json()) != model + ".apr") continue;
    for (const nlohmann::json& v : entry.value("views", nlohmann::json::array())) {
      if (v.value("view", "") == view) return v;
    }
  }
  ADD_FAILURE() << "no view " << view << " of " << model << " in status.json:\n" << status.dump(2);
  return nlohmann::json();
}

uint64_t ViewTest::ViewFigure(const std::string& model, const std::string& view,
                              const std::string& field) {
  nlohmann::json v = ViewStatus(model, view);
  if (!v.is_object() || !v.contains(field) || !v[field].is_number()) return 0;
  return v[field].get<uint64_t>();
}

std::string ViewTest::Log() const { return SlurpOrEmpty(root() + "/daemon.log"); }

int ViewTest::OpenErrno(const std::string& relative) {
  Fd fd(MP(relative), O_RDONLY);
  return fd.ok() ? 0 : errno;
}

bool ViewTest::BecomesAbsent(const std::string& relative, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  struct stat st;
  while (std::chrono::steady_clock::now() < deadline) {
    if (stat(MP(relative).c_str(), &st) != 0 && errno == ENOENT) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace aprfs_itest
