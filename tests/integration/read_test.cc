// Reading mounted models: every tensor's bytes through read(), pread, O_DIRECT and mmap equal
// the source bytes, for models of many shapes (brief items 1 and 2).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ----- models of many shapes (test 1) ---------------------------------------------------------

struct ShapeCase {
  std::string name;
  std::function<tw::TestModel()> build;
  bool synthesized_lm_head = false;
  // Per-shard data order differing from the header (name) order: rewrite the shards.
  bool shuffle_data = false;
};

tw::TestModel WithLayout(tw::TestModel model, tw::TestModel::Layout layout) {
  model.layout = layout;
  return model;
}

tw::TestModel EdgeModel() {
  auto bool_tensor = tw::MakeTensor("edge.bool_7", "BOOL", {7});
  for (char& c : bool_tensor.bytes) c = static_cast<char>(c & 1);
  tw::TestModel model;
  model.shards = {
      {tw::MakeTensor("model.embed_tokens.weight", "F32", {16, 8}),
       tw::MakeTensor("edge.empty", "F32", {0}), tw::MakeTensor("edge.empty_2d", "F16", {4, 0}),
       tw::MakeTensor("edge.scalar", "F32", {}), tw::MakeTensor("edge.u8_3", "U8", {3}),
       tw::MakeTensor("edge.i8_5", "I8", {5}), bool_tensor,
       tw::MakeTensor("edge.f16_3", "F16", {3}), tw::MakeTensor("edge.i32_1", "I32", {1})},
      {tw::MakeTensor("edge.i64_2", "I64", {2}), tw::MakeTensor("edge.f64_1", "F64", {1}),
       tw::MakeTensor("edge.bf16_3x3", "BF16", {3, 3}), tw::MakeTensor("edge.Zupper", "F32", {2}),
       tw::MakeTensor("edge.\xC3\xBCnicode", "F32", {2}),
       tw::MakeTensor("edge.long." + std::string(190, 'x'), "F32", {1}),
       tw::MakeTensor("edge.scalar_i64", "I64", {}),
       tw::MakeTensor("model.norm.weight", "F32", {8}),
       tw::MakeTensor("lm_head.weight", "F32", {16, 8}),
       tw::MakeTensor("edge.empty_last", "I32", {0})},
  };
  model.shard_layout.pad_header_to_8 = false;
  return model;  // no config.json, no tokenizer.json
}

std::vector<ShapeCase> ShapeCases() {
  using L = tw::TestModel::Layout;
  return {
      {"one_shard", [] { return tw::LlamaLikeModel(2, 1); }},
      {"three_shards_index", [] { return tw::LlamaLikeModel(4, 3); }},
      {"single_file", [] { return WithLayout(tw::LlamaLikeModel(2, 1), L::Single); }},
      {"no_index", [] { return WithLayout(tw::LlamaLikeModel(3, 3), L::NoIndex); }},
      {"hundred_shards", [] { return tw::LlamaLikeModel(40, 100, true, 7); }},
      {"unaligned_shuffled",
       [] {
         tw::TestModel m = tw::LlamaLikeModel(3, 3, true, 3);
         m.shard_layout.pad_header_to_8 = false;
         return m;
       },
       false, true},
      {"unaligned_shuffled_no_index",
       [] {
         tw::TestModel m = WithLayout(tw::LlamaLikeModel(2, 2, true, 4), L::NoIndex);
         m.shard_layout.pad_header_to_8 = false;
         return m;
       },
       false, true},
      {"edge_tensors", [] { return EdgeModel(); }, false, true},
      {"tied_embeddings", [] { return tw::LlamaLikeModel(2, 2, false, 5); }, true},
      {"tied_embeddings_single",
       [] { return WithLayout(tw::LlamaLikeModel(1, 1, false, 6), L::Single); }, true},
  };
}

// Writes the model; with shuffle_data each shard's data is laid out in a random order that
// differs from its header order (and so from name order).
tw::TestModel WriteShapeModel(const std::string& dir, const ShapeCase& c) {
  tw::TestModel model = c.build();
  std::vector<std::string> names = tw::WriteModel(dir, model);
  if (c.shuffle_data) {
    std::mt19937 rng(12345);
    for (size_t s = 0; s < model.shards.size(); ++s) {
      tw::SafetensorsLayout layout = model.shard_layout;
      std::vector<size_t> order(model.shards[s].size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::vector<size_t> identity = order;
      for (int attempt = 0; attempt < 100 && order == identity && order.size() > 1; ++attempt) {
        std::shuffle(order.begin(), order.end(), rng);
      }
      layout.data_order = order;
      tw::WriteFile(dir + "/" + names[s], tw::SafetensorsBytes(model.shards[s], layout));
    }
  }
  return model;
}

void PrintTo(const ShapeCase& c, std::ostream* os) { *os << c.name; }

class ModelShapeTest : public MountTest, public ::testing::WithParamInterface<ShapeCase> {};

TEST_P(ModelShapeTest, EveryTensorMatchesTheSourceThroughReadPreadAndMmap) {
  const ShapeCase& c = GetParam();
  tw::TestModel model = WriteShapeModel(Model(c.name), c);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  // The q4k view is listed by default when aprender's quantized import would take the model:
  // every tensor F32, F16 or BF16.
  bool quantizable = true;
  for (const auto& shard : model.shards) {
    for (const tw::TestTensor& t : shard) {
      quantizable = quantizable && (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16");
    }
  }
  std::vector<std::string> listed = {c.name + ".apr"};
  if (quantizable) listed.push_back(c.name + ".q4k.apr");
  EXPECT_EQ(ListDir(mountpoint()), listed);
  VerifyMountedModel(MP(c.name + ".apr"), Model(c.name), ExpectedOf(model, c.synthesized_lm_head));
  EXPECT_TRUE(DaemonAlive()) << DaemonState();
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelShapeTest, ::testing::ValuesIn(ShapeCases()),
                         [](const ::testing::TestParamInfo<ShapeCase>& info) {
                           return info.param.name;
                         });

// Several models in one mount: each file serves its own model.
TEST_F(MountTest, SeveralModelsInOneMountEachServeTheirOwnBytes) {
  std::map<std::string, tw::TestModel> models = {
      {"alpha", tw::LlamaLikeModel(2, 2, true, 11)},
      {"beta", tw::LlamaLikeModel(2, 3, true, 12)},
      {"gamma", WithLayout(tw::LlamaLikeModel(1, 1, true, 13), tw::TestModel::Layout::Single)},
  };
  for (const auto& [name, model] : models) tw::WriteModel(Model(name), model);
  ASSERT_NO_FATAL_FAILURE(MountModels());
  EXPECT_EQ(ListDir(mountpoint()),
            (std::vector<std::string>{"alpha.apr", "alpha.q4k.apr", "beta.apr", "beta.q4k.apr",
                                      "gamma.apr", "gamma.q4k.apr"}));
  for (const auto& [name, model] : models) {
    SCOPED_TRACE(name);
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP(name + ".apr"), &bytes, &error)) << error;
    AprLayout layout = ParseAprBytes(bytes);
    ExpectLayoutMatches(layout, ExpectedOf(model));
    ExpectTensorBytes(layout, ExpectedOf(model), bytes, "read()");
  }
}

// ----- cp of the mounted file (test 2) --------------------------------------------------------

uint32_t Crc32Of(const std::string& bytes, size_t length) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(length)));
}

void ExpectCopyIsValid(const std::string& mounted, const std::string& copy,
                       const std::string& source_dir) {
  ProcResult cp = RunCommand({"cp", mounted, copy}, 60s);
  ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
  ProcResult cmp = RunCommand({"cmp", mounted, copy}, 60s);
  EXPECT_EQ(cmp.exit_code, 0) << "copy differs from the mounted file: " << cmp.Describe();
  EXPECT_EQ(FileSize(copy), FileSize(mounted));

  ProcResult inspect = RunAprfs({"inspect", copy}, 60s);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("footer: ok"), std::string::npos) << inspect.Describe();
  ProcResult inspect_json = RunAprfs({"inspect", copy, "--json"}, 60s);
  EXPECT_EQ(inspect_json.exit_code, 0) << inspect_json.Describe();
  nlohmann::json report = nlohmann::json::parse(inspect_json.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << inspect_json.Describe();
  EXPECT_EQ(report.value("valid", false), true) << report.dump(2);
  EXPECT_EQ(report.value("footer", std::string()).rfind("ok", 0), 0u) << report.dump(2);

  ProcResult check = RunAprcheck(copy, source_dir);
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
}

TEST_F(MountTest, CpOfMountedFileIsByteIdenticalAndValid) {
  // ~6 MiB over 3 shards plus a llama-like model: cp reads sequentially across shards and
  // gets the footer from the incremental CRC.
  tw::TestModel bulk = BulkModel(3, 2 << 20, 21);
  tw::WriteModel(Model("bulk"), bulk);
  tw::TestModel llama = tw::LlamaLikeModel(3, 3, false, 22);
  tw::WriteModel(Model("llama"), llama);
  ASSERT_NO_FATAL_FAILURE(MountModels());

  // The footer of "llama" read first, before any data (computed on demand), over O_DIRECT so
  // the daemon really answers it.
  std::string footer_first(4, '\0');
  {
    uint64_t size = FileSize(MP("llama.apr"));
    ASSERT_GT(size, 4u);
    Fd fd(MP("llama.apr"), O_RDONLY | O_DIRECT);
    ASSERT_TRUE(fd.ok()) << std::strerror(errno);
    ASSERT_EQ(PreadFull(fd.get(), footer_first.data(), 4, size - 4), 4);
  }
  for (const std::string name : {"bulk", "llama"}) {
    SCOPED_TRACE(name);
    std::string copy = work_dir() + "/" + name + ".apr";
    ASSERT_NO_FATAL_FAILURE(ExpectCopyIsValid(MP(name + ".apr"), copy, Model(name)));
    std::string bytes = SlurpOrEmpty(copy);
    ASSERT_GT(bytes.size(), 4u);
    uint32_t crc = Crc32Of(bytes, bytes.size() - 4);
    uint32_t stored = 0;
    for (int i = 3; i >= 0; --i)
      stored = stored << 8 | static_cast<uint8_t>(bytes[bytes.size() - 4 + i]);
    EXPECT_EQ(stored, crc) << "footer of the copy is not the CRC32 of the preceding bytes";
    if (std::string(name) == "llama") {
      EXPECT_EQ(footer_first, bytes.substr(bytes.size() - 4))
          << "footer read first differs from the footer cp got";
    }
    AprLayout layout = ParseAprBytes(bytes);
    ExpectLayoutMatches(layout, ExpectedOf(name == std::string("bulk") ? bulk : llama,
                                           name != std::string("bulk")));
  }
}

// ----- models from the independent Python generator (test 2) ----------------------------------

struct PresetCase {
  std::string name;
  std::vector<std::string> args;
};

void PrintTo(const PresetCase& c, std::ostream* os) { *os << c.name; }

class MakeModelPresetTest : public MountTest, public ::testing::WithParamInterface<PresetCase> {};

TEST_P(MakeModelPresetTest, PassesAprcheckThroughTheMountAndAsACopy) {
  const PresetCase& c = GetParam();
  std::vector<std::string> args = {Model(c.name)};
  args.insert(args.end(), c.args.begin(), c.args.end());
  ProcResult made = RunMakeModel(args);
  ASSERT_EQ(made.exit_code, 0) << made.Describe();
  ASSERT_NO_FATAL_FAILURE(MountModels());
  const std::string mounted = MP(c.name + ".apr");
  ASSERT_TRUE(fs::exists(mounted))
      << "not in the mount; listing: " << ::testing::PrintToString(ListDir(mountpoint())) << "\n"
      << DaemonLog();
  ProcResult check = RunAprcheck(mounted, Model(c.name));
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  DropPageCache(mounted);
  ProcResult mapped = RunAprcheck(mounted, Model(c.name), {"--mmap"});
  EXPECT_EQ(mapped.exit_code, 0) << mapped.Describe();
  ExpectCopyIsValid(mounted, work_dir() + "/copy.apr", Model(c.name));
}

INSTANTIATE_TEST_SUITE_P(
    Presets, MakeModelPresetTest,
    ::testing::Values(
        PresetCase{"tiny", {"--preset", "tiny"}},
        PresetCase{"tiny_unaligned_shuffled",
                   {"--preset", "tiny", "--unaligned", "--shuffle-data", "--seed", "3"}},
        PresetCase{"llama_tiny", {"--preset", "llama-tiny"}},
        PresetCase{"llama_tiny_single_unaligned_shuffled",
                   {"--preset", "llama-tiny", "--layout", "single", "--unaligned", "--shuffle-data",
                    "--seed", "4"}},
        PresetCase{"edge", {"--preset", "edge"}},
        PresetCase{"edge_noindex_unaligned_shuffled",
                   {"--preset", "edge", "--layout", "noindex", "--shards", "3", "--unaligned",
                    "--shuffle-data", "--seed", "5"}},
        PresetCase{"edge_tied_unaligned",
                   {"--preset", "edge", "--tie-embeddings", "--unaligned", "--shuffle-data"}},
        PresetCase{
            "many_shards_100",
            {"--preset", "many-shards", "--shards", "100", "--shuffle-data", "--unaligned"}}),
    [](const ::testing::TestParamInfo<PresetCase>& info) { return info.param.name; });

}  // namespace
}  // namespace aprfs_itest
