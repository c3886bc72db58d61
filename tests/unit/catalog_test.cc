// Catalog + Namespace over --source folders and an HF cache written by tests/support
// (design.md "Names in the mount", hf-hub.md §5-6).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fetch/hf_cache.h"
#include "fetch/local_model.h"
#include "format/views/model_import.h"
#include "fs/catalog.h"
#include "fs/namespace.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using testing::LlamaLikeModel;
using testing::MakeTensor;
using testing::TempDir;
using testing::TestModel;
using testing::WriteFile;
using testing::WriteHfCacheRepo;
using testing::WriteModel;

std::string Commit(char c) { return std::string(40, c); }

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TestModel SmallModel(uint32_t seed = 1) {
  TestModel model;
  model.shards = {{MakeTensor("model.embed_tokens.weight", "F16", {16, 8}, seed),
                   MakeTensor("model.norm.weight", "F32", {8}, seed)},
                  {MakeTensor("lm_head.weight", "F16", {16, 8}, seed)}};
  model.config_json = "{\"model_type\":\"llama\",\"hidden_size\":8}";
  return model;
}

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);  // rejected models are logged on purpose
    fs::create_directories(cache());
  }
  void TearDown() override { spdlog::set_level(log_level_); }

  std::string cache() const { return root_ / "hub"; }

  // Writes `model` into a staging folder and lays it out as an HF cache repo.
  std::string AddHfRepo(const std::string& repo_id, const TestModel& model,
                        const std::string& commit = Commit('a')) {
    std::string staging = root_ / ("staging/" + repo_id + "/" + commit);
    WriteModel(staging, model);
    return WriteHfCacheRepo(cache(), repo_id, commit, staging);
  }

  std::string AddSourceFolder(const std::string& relative, const TestModel& model) {
    std::string dir = root_ / relative;
    WriteModel(dir, model);
    return dir;
  }

  CatalogOptions Options(std::vector<std::string> sources = {}, bool with_cache = true) {
    CatalogOptions options;
    if (with_cache) options.hf_cache = cache();
    options.sources = std::move(sources);
    options.rescan_interval = std::chrono::milliseconds(0);
    options.listed_views = {ViewKind::kApr};  // names of models here; views: view tests
    return options;
  }

  static std::vector<std::string> EntryNames(const std::optional<std::vector<Namespace::Entry>>& entries) {
    std::vector<std::string> names;
    if (entries) {
      for (const auto& e : *entries) names.push_back(e.name + (e.attr.is_dir ? "/" : ""));
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::string ReadAll(VirtualFile& file) {
    std::string out(file.size(), '\0');
    EXPECT_EQ(file.Read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
  }

  spdlog::level::level_enum log_level_ = spdlog::level::info;
  TempDir root_;
};

TEST_F(CatalogTest, HfCacheNamesShortAndUnderOrg) {
  AddHfRepo("microsoft/phi-4", SmallModel(1));
  AddHfRepo("gpt2", SmallModel(2));  // legacy id without a namespace
  AddHfRepo("Qwen/Qwen2.5-0.5B", SmallModel(3));
  // Things in a cache that are not model repos.
  fs::create_directories(cache() + "/datasets--org--data/snapshots");
  fs::create_directories(cache() + "/.locks/models--microsoft--phi-4");
  WriteFile(cache() + "/CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55");

  Catalog catalog(Options());
  auto listing = catalog.Scan();
  EXPECT_EQ(listing->top_files,
            (std::map<std::string, std::string>{{"Qwen2.5-0.5B.apr", "hf:Qwen/Qwen2.5-0.5B"},
                                                {"gpt2.apr", "hf:gpt2"},
                                                {"phi-4.apr", "hf:microsoft/phi-4"}}));
  ASSERT_EQ(listing->org_files.size(), 2u);
  EXPECT_EQ(listing->org_files.at("microsoft"),
            (std::map<std::string, std::string>{{"phi-4.apr", "hf:microsoft/phi-4"}}));
  EXPECT_EQ(listing->org_files.at("Qwen").size(), 1u);

  Namespace ns(catalog);
  EXPECT_EQ(EntryNames(ns.List(Namespace::kRootInode)),
            (std::vector<std::string>{"Qwen/", "Qwen2.5-0.5B.apr", "gpt2.apr", "microsoft/",
                                      "phi-4.apr"}));
  auto top = ns.Lookup(Namespace::kRootInode, "phi-4.apr");
  ASSERT_TRUE(top.has_value());
  EXPECT_FALSE(top->is_dir);
  auto org = ns.Lookup(Namespace::kRootInode, "microsoft");
  ASSERT_TRUE(org.has_value());
  EXPECT_TRUE(org->is_dir);
  EXPECT_EQ(EntryNames(ns.List(org->inode)), (std::vector<std::string>{"phi-4.apr"}));
  auto nested = ns.Lookup(org->inode, "phi-4.apr");
  ASSERT_TRUE(nested.has_value());
  EXPECT_EQ(nested->inode, top->inode);  // the same model, the same file
  EXPECT_EQ(nested->size, top->size);
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "phi-4").has_value());
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "nope.apr").has_value());
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "data.apr").has_value());
  EXPECT_FALSE(ns.Lookup(org->inode, "gpt2.apr").has_value());
  EXPECT_FALSE(ns.List(top->inode).has_value());  // a file is not a folder
  auto attr = ns.GetAttr(top->inode);
  ASSERT_TRUE(attr.has_value());
  EXPECT_EQ(attr->size, top->size);
  EXPECT_TRUE(ns.GetAttr(Namespace::kRootInode)->is_dir);

  // The file is the APR file of the snapshot, named after the repo, with its hf:// source.
  std::shared_ptr<VirtualFile> file = ns.Open(top->inode);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->size(), top->size);
  std::string bytes = ReadAll(*file);
  std::string snapshot = cache() + "/models--microsoft--phi-4/snapshots/" + Commit('a');
  LoadedModel loaded = LoadLocalModel(snapshot, "phi-4", "hf://microsoft/phi-4");
  ImportedModel imported = ImportShardSet(loaded.set);
  EXPECT_EQ(bytes.substr(0, imported.plan.prefix.size()), imported.plan.prefix);
  EXPECT_NE(imported.plan.prefix.find("\"name\":\"phi-4\""), std::string::npos);
  EXPECT_NE(imported.plan.prefix.find("\"source\":\"hf://microsoft/phi-4\""), std::string::npos);
  uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()),
                                             static_cast<uInt>(bytes.size() - 4)));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(bytes[bytes.size() - 4 + i]), (crc >> (8 * i)) & 0xFF);
  }
}

TEST_F(CatalogTest, SameShortNameOnlyUnderOrg) {
  AddHfRepo("alpha/model", SmallModel(1));
  AddHfRepo("beta/model", SmallModel(2));
  AddHfRepo("beta/unique", SmallModel(3));
  Catalog catalog(Options());
  auto listing = catalog.Scan();
  EXPECT_EQ(listing->top_files.count("model.apr"), 0u);
  EXPECT_EQ(listing->top_files.count("unique.apr"), 1u);
  EXPECT_EQ(listing->org_files.at("alpha").at("model.apr"), "hf:alpha/model");
  EXPECT_EQ(listing->org_files.at("beta").at("model.apr"), "hf:beta/model");

  Namespace ns(catalog);
  EXPECT_EQ(EntryNames(ns.List(Namespace::kRootInode)),
            (std::vector<std::string>{"alpha/", "beta/", "unique.apr"}));
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "model.apr").has_value());
  auto alpha = ns.Lookup(Namespace::kRootInode, "alpha");
  auto beta = ns.Lookup(Namespace::kRootInode, "beta");
  ASSERT_TRUE(alpha && beta);
  EXPECT_NE(alpha->inode, beta->inode);
  auto a = ns.Lookup(alpha->inode, "model.apr");
  auto b = ns.Lookup(beta->inode, "model.apr");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->inode, b->inode);
  EXPECT_EQ(EntryNames(ns.List(beta->inode)), (std::vector<std::string>{"model.apr", "unique.apr"}));
}

TEST_F(CatalogTest, ExplicitSourceWinsTheShortName) {
  AddHfRepo("alpha/model", SmallModel(1));
  AddHfRepo("beta/model", SmallModel(2));
  std::string source = AddSourceFolder("local/model", SmallModel(4));
  Catalog catalog(Options({source + "/"}));  // a trailing slash, as shells complete it
  auto listing = catalog.Scan();
  ASSERT_EQ(listing->top_files.count("model.apr"), 1u);
  EXPECT_EQ(listing->top_files.at("model.apr"), "dir:" + fs::weakly_canonical(source).string());
  EXPECT_EQ(listing->org_files.at("alpha").count("model.apr"), 1u);
  EXPECT_EQ(listing->org_files.at("beta").count("model.apr"), 1u);

  Namespace ns(catalog);
  auto top = ns.Lookup(Namespace::kRootInode, "model.apr");
  ASSERT_TRUE(top.has_value());
  std::shared_ptr<VirtualFile> file = ns.Open(top->inode);
  ASSERT_NE(file, nullptr);
  EXPECT_NE(file->plan().prefix.find("\"source\":\"file://"), std::string::npos);

  // One HF repo against one --source: the source wins too.
  TempDir other;
  WriteHfCacheRepo(other / "hub", "gamma/model", Commit('c'), root_ / "local/model");
  CatalogOptions options;
  options.hf_cache = other / "hub";
  options.sources = {source};
  options.rescan_interval = std::chrono::milliseconds(0);
  Catalog single(options);
  auto one = single.Scan();
  EXPECT_EQ(one->top_files.at("model.apr").rfind("dir:", 0), 0u);
  EXPECT_EQ(one->org_files.at("gamma").at("model.apr"), "hf:gamma/model");
}

// Every model must stay reachable under some name. A repo without a namespace (legacy ids such
// as "gpt2", still common in caches next to "openai-community/gpt2") has no <org>/ folder, so
// losing the short name to a collision hides it completely.
TEST_F(CatalogTest, LegacyRepoCollidingWithOrgRepoStaysReachable) {
  AddHfRepo("gpt2", SmallModel(1));
  AddHfRepo("openai-community/gpt2", SmallModel(2));
  Catalog catalog(Options());
  auto listing = catalog.Scan();
  bool reachable = false;
  for (const auto& [name, key] : listing->top_files) reachable = reachable || key == "hf:gpt2";
  for (const auto& [org, files] : listing->org_files) {
    for (const auto& [name, key] : files) reachable = reachable || key == "hf:gpt2";
  }
  EXPECT_TRUE(reachable) << "hf:gpt2 is listed nowhere";
  EXPECT_EQ(listing->org_files.at("openai-community").at("gpt2.apr"), "hf:openai-community/gpt2");
}

TEST_F(CatalogTest, TwoSourceFoldersWithTheSameNameStayReachable) {
  std::string first = AddSourceFolder("v1/llama", SmallModel(1));
  std::string second = AddSourceFolder("v2/llama", SmallModel(2));
  Catalog catalog(Options({first, second}, /*with_cache=*/false));
  auto listing = catalog.Scan();
  std::set<std::string> keys;
  for (const auto& [name, key] : listing->top_files) keys.insert(key);
  for (const auto& [org, files] : listing->org_files) {
    for (const auto& [name, key] : files) keys.insert(key);
  }
  EXPECT_EQ(keys.count("dir:" + fs::weakly_canonical(first).string()), 1u);
  EXPECT_EQ(keys.count("dir:" + fs::weakly_canonical(second).string()), 1u)
      << "the second --source folder is listed nowhere";
}

TEST_F(CatalogTest, SourceParentFolderListsEachModelFolder) {
  std::string parent = root_ / "models";
  AddSourceFolder("models/first", SmallModel(1));
  AddSourceFolder("models/second", SmallModel(2));
  AddSourceFolder("models/.hidden", SmallModel(3));
  fs::create_directories(parent + "/empty-folder");
  WriteFile(parent + "/empty-folder/README.md", "no weights here");
  Catalog catalog(Options({parent}, /*with_cache=*/false));
  auto listing = catalog.Scan();
  EXPECT_EQ(listing->top_files.size(), 2u);
  EXPECT_EQ(listing->top_files.count("first.apr"), 1u);
  EXPECT_EQ(listing->top_files.count("second.apr"), 1u);
  EXPECT_TRUE(listing->org_files.empty());
  Namespace ns(catalog);
  EXPECT_EQ(EntryNames(ns.List(Namespace::kRootInode)),
            (std::vector<std::string>{"first.apr", "second.apr"}));
}

TEST_F(CatalogTest, ModelWithBadShardIsHiddenOthersWork) {
  AddHfRepo("org/good", SmallModel(1));
  // "broken": its second shard's header is not JSON.
  std::string staging = root_ / "staging/broken";
  WriteModel(staging, SmallModel(2));
  std::string bad = "{\"oops";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>(i == 0 ? bad.size() : 0);
  WriteFile(staging + "/model-00002-of-00002.safetensors", bytes + bad);
  WriteHfCacheRepo(cache(), "org/broken", Commit('b'), staging);
  std::string local_bad = AddSourceFolder("src/also-broken", SmallModel(3));
  WriteFile(local_bad + "/model-00001-of-00002.safetensors", "tiny");

  Catalog catalog(Options({local_bad}));
  Namespace ns(catalog);
  EXPECT_EQ(EntryNames(ns.List(Namespace::kRootInode)), (std::vector<std::string>{"good.apr", "org/"}));
  auto org = ns.Lookup(Namespace::kRootInode, "org");
  ASSERT_TRUE(org.has_value());
  EXPECT_EQ(EntryNames(ns.List(org->inode)), (std::vector<std::string>{"good.apr"}));
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "broken.apr").has_value());
  EXPECT_FALSE(ns.Lookup(org->inode, "broken.apr").has_value());
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "also-broken.apr").has_value());
  auto good = ns.Lookup(Namespace::kRootInode, "good.apr");
  ASSERT_TRUE(good.has_value());
  ASSERT_NE(ns.Open(good->inode), nullptr);
  EXPECT_EQ(ReadAll(*ns.Open(good->inode)).substr(0, 4), std::string("APR\0", 4));

  std::map<std::string, std::shared_ptr<const BuiltModel>> all;
  for (const auto& model : catalog.All()) all[model->ref.key] = model;
  ASSERT_EQ(all.size(), 3u);
  const auto& broken = all.at("hf:org/broken");
  EXPECT_EQ(broken->file, nullptr);
  EXPECT_NE(broken->error.find("model-00002-of-00002.safetensors"), std::string::npos)
      << broken->error;
  EXPECT_NE(broken->error.find("InvalidHeaderDeserialization"), std::string::npos) << broken->error;
  const auto& local = all.at("dir:" + fs::weakly_canonical(local_bad).string());
  EXPECT_EQ(local->file, nullptr);
  EXPECT_NE(local->error.find("model-00001-of-00002.safetensors"), std::string::npos)
      << local->error;
  EXPECT_NE(local->error.find("HeaderTooSmall"), std::string::npos) << local->error;
  EXPECT_NE(all.at("hf:org/good")->file, nullptr);
  EXPECT_TRUE(all.at("hf:org/good")->error.empty());
  EXPECT_EQ(all.at("hf:org/good")->shard_count, 2u);
}

TEST_F(CatalogTest, BrokenRefsAreRejectedWithAReason) {
  AddHfRepo("org/fine", SmallModel(1));
  // refs/main missing.
  AddHfRepo("org/noref", SmallModel(2), Commit('c'));
  fs::remove(cache() + "/models--org--noref/refs/main");
  // refs/main names a commit whose snapshot is missing.
  AddHfRepo("org/dangling", SmallModel(3), Commit('d'));
  std::ofstream(cache() + "/models--org--dangling/refs/main", std::ios::trunc) << Commit('e');
  // refs/main that is not a commit.
  AddHfRepo("org/garbled", SmallModel(4), Commit('f'));
  std::ofstream(cache() + "/models--org--garbled/refs/main", std::ios::trunc) << "main";
  // A trailing newline written by another tool is tolerated.
  AddHfRepo("org/newline", SmallModel(5), Commit('9'));
  std::ofstream(cache() + "/models--org--newline/refs/main", std::ios::trunc) << Commit('9') << "\n";

  Catalog catalog(Options());
  std::map<std::string, std::shared_ptr<const BuiltModel>> all;
  for (const auto& model : catalog.All()) all[model->ref.key] = model;
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all.at("hf:org/noref")->file, nullptr);
  EXPECT_NE(all.at("hf:org/noref")->error.find("refs/main"), std::string::npos)
      << all.at("hf:org/noref")->error;
  EXPECT_EQ(all.at("hf:org/dangling")->file, nullptr);
  EXPECT_NE(all.at("hf:org/dangling")->error.find(Commit('e')), std::string::npos)
      << all.at("hf:org/dangling")->error;
  EXPECT_NE(all.at("hf:org/dangling")->error.find("missing"), std::string::npos)
      << all.at("hf:org/dangling")->error;
  EXPECT_EQ(all.at("hf:org/garbled")->file, nullptr);
  EXPECT_NE(all.at("hf:org/garbled")->error.find("40-hex"), std::string::npos)
      << all.at("hf:org/garbled")->error;
  EXPECT_NE(all.at("hf:org/fine")->file, nullptr);
  EXPECT_NE(all.at("hf:org/newline")->file, nullptr) << all.at("hf:org/newline")->error;

  Namespace ns(catalog);
  auto org = ns.Lookup(Namespace::kRootInode, "org");
  ASSERT_TRUE(org.has_value());
  EXPECT_EQ(EntryNames(ns.List(org->inode)), (std::vector<std::string>{"fine.apr", "newline.apr"}));
  for (const char* name : {"noref.apr", "dangling.apr", "garbled.apr"}) {
    EXPECT_FALSE(ns.Lookup(org->inode, name).has_value()) << name;
    EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, name).has_value()) << name;
  }

  std::vector<CachedRepo> repos = ListCachedModels(cache());
  ASSERT_EQ(repos.size(), 5u);
  for (size_t i = 1; i < repos.size(); ++i) EXPECT_LT(repos[i - 1].repo_id, repos[i].repo_id);
  for (const CachedRepo& repo : repos) {
    if (repo.repo_id == "org/newline") {
      EXPECT_EQ(repo.commit, Commit('9'));
      EXPECT_TRUE(repo.problem.empty());
    }
    if (repo.repo_id == "org/dangling") {
      EXPECT_TRUE(repo.snapshot_dir.empty());
    }
  }
}

TEST_F(CatalogTest, ChangedFilesGiveANewInode) {
  std::string source = AddSourceFolder("src/changing", SmallModel(1));
  Catalog catalog(Options({source}, /*with_cache=*/false));
  Namespace ns(catalog);
  auto first = ns.Lookup(Namespace::kRootInode, "changing.apr");
  ASSERT_TRUE(first.has_value());
  auto again = ns.Lookup(Namespace::kRootInode, "changing.apr");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->inode, first->inode);  // nothing changed
  std::shared_ptr<VirtualFile> old_file = ns.Open(first->inode);
  ASSERT_NE(old_file, nullptr);
  std::string old_bytes = ReadAll(*old_file);

  // Replace shard 2 the way the HF client does: a new file renamed over the old one.
  TestModel bigger = SmallModel(2);
  bigger.shards[1].push_back(MakeTensor("extra.weight", "F32", {33}, 2));
  std::string staging = root_ / "staging/changing";
  WriteModel(staging, bigger);
  fs::rename(staging + "/model-00002-of-00002.safetensors",
             source + "/model-00002-of-00002.safetensors");
  fs::copy_file(staging + "/model.safetensors.index.json",
                source + "/model.safetensors.index.json", fs::copy_options::overwrite_existing);

  auto changed = ns.Lookup(Namespace::kRootInode, "changing.apr");
  ASSERT_TRUE(changed.has_value());
  EXPECT_NE(changed->inode, first->inode);
  EXPECT_NE(changed->size, first->size);
  std::shared_ptr<VirtualFile> new_file = ns.Open(changed->inode);
  ASSERT_NE(new_file, nullptr);
  EXPECT_NE(new_file->plan().prefix.find("extra.weight"), std::string::npos);
  // The old inode keeps its old file until the kernel forgets it.
  EXPECT_EQ(ns.Open(first->inode), old_file);
  EXPECT_TRUE(ReadAll(*old_file) == old_bytes);
  ns.Forget(first->inode, 2);
  EXPECT_EQ(ns.Open(first->inode), nullptr);
  EXPECT_NE(ns.Open(changed->inode), nullptr);

  // A same-size replacement is a change too (new inode on disk).
  std::string shard = source + "/model-00001-of-00002.safetensors";
  std::string content = ReadFileBytes(shard);
  WriteFile(shard + ".tmp", content);
  fs::rename(shard + ".tmp", shard);
  auto same_size = ns.Lookup(Namespace::kRootInode, "changing.apr");
  ASSERT_TRUE(same_size.has_value());
  EXPECT_NE(same_size->inode, changed->inode);
  EXPECT_EQ(same_size->size, changed->size);
}

TEST_F(CatalogTest, NewSnapshotInHfCacheGivesANewInode) {
  AddHfRepo("org/moving", SmallModel(1), Commit('1'));
  Catalog catalog(Options());
  Namespace ns(catalog);
  auto first = ns.Lookup(Namespace::kRootInode, "moving.apr");
  ASSERT_TRUE(first.has_value());
  TestModel next = SmallModel(2);
  next.shards[0].push_back(MakeTensor("new.bias", "F32", {5}, 2));
  AddHfRepo("org/moving", next, Commit('2'));  // also points refs/main at the new commit
  auto second = ns.Lookup(Namespace::kRootInode, "moving.apr");
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->inode, first->inode);
  EXPECT_NE(ns.Open(second->inode)->plan().prefix.find("new.bias"), std::string::npos);
}

// The index may put shards in subfolders (ParseWeightIndex accepts "sub/x.safetensors" and
// LoadLocalModel reads them), so a change there must trigger a rebuild like a top-level one.
TEST_F(CatalogTest, ChangedShardInSubfolderGivesANewInode) {
  std::string dir = root_ / "src/nested";
  TestModel model = SmallModel(1);
  WriteFile(dir + "/sub/a.safetensors", testing::SafetensorsBytes(model.shards[0]));
  WriteFile(dir + "/sub/b.safetensors", testing::SafetensorsBytes(model.shards[1]));
  WriteFile(dir + "/model.safetensors.index.json",
            "{\"weight_map\":{\"model.embed_tokens.weight\":\"sub/a.safetensors\","
            "\"model.norm.weight\":\"sub/a.safetensors\","
            "\"lm_head.weight\":\"sub/b.safetensors\"}}");
  Catalog catalog(Options({dir}, /*with_cache=*/false));
  Namespace ns(catalog);
  auto first = ns.Lookup(Namespace::kRootInode, "nested.apr");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(ns.Open(first->inode)->plan().extents.size(), 3u);

  // Replace sub/b.safetensors by rename with a bigger lm_head.
  WriteFile(dir + "/sub/b.tmp",
            testing::SafetensorsBytes({MakeTensor("lm_head.weight", "F16", {32, 8}, 9)}));
  fs::rename(dir + "/sub/b.tmp", dir + "/sub/b.safetensors");
  auto second = ns.Lookup(Namespace::kRootInode, "nested.apr");
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->inode, first->inode);
  std::shared_ptr<VirtualFile> file = ns.Open(second->inode);
  ASSERT_NE(file, nullptr);
  EXPECT_NE(file->plan().prefix.find("\"lm_head.weight\":[32,8]"), std::string::npos)
      << "the mount still serves the old version of sub/b.safetensors";
  std::string bytes(file->size(), '\0');
  EXPECT_EQ(file->Read(0, bytes.size(), bytes.data()), static_cast<ssize_t>(bytes.size()));
}

TEST_F(CatalogTest, FolderFingerprintFollowsRelevantFiles) {
  std::string dir = AddSourceFolder("src/fp", SmallModel(1));
  std::string before = FolderFingerprint(dir);
  EXPECT_EQ(FolderFingerprint(dir), before);
  WriteFile(dir + "/README.md", "not relevant");
  EXPECT_EQ(FolderFingerprint(dir), before);
  WriteFile(dir + "/config.json", "{\"model_type\":\"phi3\",\"hidden_size\":8,\"x\":1}");
  EXPECT_NE(FolderFingerprint(dir), before);
}

// ---------------------------------------------------------------------------------------------
// Where the HF cache is.

class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) : names_(std::move(names)) {
    for (const std::string& name : names_) {
      const char* value = std::getenv(name.c_str());
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name.c_str());
    }
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::string> names_;
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(DefaultHfHubCache, Precedence) {
  EnvGuard guard({"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"});
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/home/u/.cache/huggingface/hub");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/xdg/huggingface/hub");
  setenv("HF_HOME", "/hf", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/hf/hub");
  setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/legacy");
  setenv("HF_HUB_CACHE", "/explicit", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/explicit");
  // Empty values count as unset.
  setenv("HF_HUB_CACHE", "", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/legacy");
  setenv("HUGGINGFACE_HUB_CACHE", "", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/hf/hub");
  setenv("HF_HOME", "", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/xdg/huggingface/hub");
  setenv("XDG_CACHE_HOME", "", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/home/u/.cache/huggingface/hub");
}

TEST(DefaultHfHubCache, TildeExpansion) {
  EnvGuard guard({"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"});
  setenv("HOME", "/home/u", 1);
  setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/home/u/hf/hub");
  setenv("HF_HUB_CACHE", "~", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/home/u");
  setenv("HF_HUB_CACHE", "~other/cache", 1);  // only "~" and "~/" are expanded
  EXPECT_EQ(DefaultHfHubCache(), "~other/cache");
  setenv("HF_HUB_CACHE", "/a/~/b", 1);
  EXPECT_EQ(DefaultHfHubCache(), "/a/~/b");
  unsetenv("HF_HUB_CACHE");
  setenv("XDG_CACHE_HOME", "~/xdg", 1);
  unsetenv("HF_HOME");
  EXPECT_EQ(DefaultHfHubCache(), "/home/u/xdg/huggingface/hub");
}

TEST(RepoIdFromFolder, ModelFoldersOnly) {
  EXPECT_EQ(RepoIdFromFolder("models--microsoft--phi-4"), "microsoft/phi-4");
  EXPECT_EQ(RepoIdFromFolder("models--gpt2"), "gpt2");
  EXPECT_EQ(RepoIdFromFolder("models--Qwen--Qwen2.5-7B-Instruct"), "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(RepoIdFromFolder("models--meta-llama--Llama-3.1-8B"), "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(RepoIdFromFolder("models--Org.Name--Repo_1.5-x"), "Org.Name/Repo_1.5-x");
  EXPECT_EQ(RepoIdFromFolder("models--a-b--c"), "a-b/c");
  for (const char* not_a_model :
       {"datasets--org--data", "spaces--org--app", "kernels--org--k", "models--", "model--x",
        "models-x", "models--a--b--c", "models----x", "models--org--", ".locks", "CACHEDIR.TAG",
        "", "Models--org--x"}) {
    EXPECT_FALSE(RepoIdFromFolder(not_a_model).has_value()) << not_a_model;
  }
}

}  // namespace
}  // namespace aprfs
