// What aprender's import refuses, aprfs does not offer: single-file models with a NaN, an Inf or
// a mean beyond +-100 in any tensor (every quantized view), int4 of a tensor whose 4-bit codes are
// almost all zero, views of models with dtypes it cannot convert, models whose FP8 weights lack
// their scales. Sharded models are not checked (their poison reaches the encoders, as in
// aprender), and an all-zero lm_head.weight of a single-file model is tied to the embedding.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <thread>

#include "tests/integration/view_fixture.h"

namespace aprfs_itest {
namespace {

// The tensor named in apr_views.py's refusal ("..., tensor 'NAME': ...").
std::string RefusedTensor(const ViewReference& ref) {
  std::smatch match;
  static const std::regex kTensor("tensor '([^']+)'");
  return std::regex_search(ref.message, match, kTensor) ? match[1].str() : "";
}

class ViewRefusalTest : public ViewTest {
 protected:
  // Whole-file read (O_DIRECT) equals the reference.
  void ExpectServed(const std::string& model, const std::string& view) {
    std::string got, error;
    ASSERT_TRUE(ReadDirect(MP(ViewFileName(model, view)), &got, &error)) << view << ": " << error;
    EXPECT_EQ(FirstDifference(got, ExpectedBytes(model, view)), std::nullopt) << view;
  }
  // The model's .apr is served whatever its views' fate.
  void ExpectPlainAprValid(const std::string& model) {
    ProcResult check = RunAprcheck(MP(model + ".apr"), Model(model));
    EXPECT_EQ(check.exit_code, 0) << check.Describe();
  }
  void ExpectNotFound(const std::string& relative) {
    struct stat st;
    errno = 0;
    EXPECT_NE(stat(MP(relative).c_str(), &st), 0) << relative << " resolves";
    EXPECT_EQ(errno, ENOENT) << relative;
  }
};

// ----- single-file value checks -------------------------------------------------------------

struct PoisonCase {
  std::string name;
  std::vector<std::string> make_model_args;
  std::string rule;  // a word of the log's refusal
};

void PrintTo(const PoisonCase& c, std::ostream* os) { *os << c.name; }

class ViewPoisonTest : public ViewRefusalTest, public ::testing::WithParamInterface<PoisonCase> {};

TEST_P(ViewPoisonTest, SingleFileModelIsRefusedByEveryQuantizedViewNamingTheFirstBadTensor) {
  SetWatchdog(180s);
  const PoisonCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(MakeModel("p", c.make_model_args));
  PrepareReferences(EveryQuantizedView({"p"}));
  for (const std::string& view : kQuantizedViews) {
    ASSERT_TRUE(Reference("p", view).refused())
        << "apr_views.py --view " << view << " accepts it: " << Reference("p", view).message;
  }
  const std::string tensor = RefusedTensor(Reference("p", "q4k"));
  ASSERT_FALSE(tensor.empty()) << Reference("p", "q4k").message;

  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  // Unchecked views are listed (a listing does not read the values)...
  EXPECT_EQ(ListDir(mountpoint()).size(), 6u);
  EXPECT_EQ(ViewStatus("p", "q4k").value("state", ""), "unchecked");
  // ...until the first open, which scans the model and fails.
  EXPECT_EQ(OpenErrno("p.q4k.apr"), EIO);
  const std::string log = Log();
  EXPECT_NE(log.find("p.q4k.apr: aprender's import refuses this model: tensor '" + tensor + "'"),
            std::string::npos)
      << "the log does not name '" << tensor << "' (apr_views.py: " << Reference("p", "q4k").message
      << ")\n"
      << log;
  EXPECT_NE(log.find(c.rule), std::string::npos) << "the log does not say '" << c.rule << "'";
  EXPECT_EQ(OpenErrno("p.q4k.apr"), EIO) << "a second open";

  // Afterwards no quantized view is offered: not listed, not found, refused in status.json.
  // The merged safetensors, the shards' own bytes, still is.
  const std::vector<std::string> left = {"p.apr", "p.safetensors"};
  EXPECT_EQ(ListDir(mountpoint()), left);
  for (const char* view : {"f16", "int8", "int4"}) ExpectNotFound(ViewFileName("p", view));
  EXPECT_TRUE(BecomesAbsent("p.q4k.apr")) << "p.q4k.apr is still found";
  for (const std::string& view : kQuantizedViews) {
    nlohmann::json status = ViewStatus("p", view);
    EXPECT_EQ(status.value("state", ""), "refused") << status.dump(2);
    EXPECT_NE(status.value("error", "").find(tensor), std::string::npos) << status.dump(2);
  }
  ExpectPlainAprValid("p");
  UnmountCleanly();

  // The verdict is kept with the cache: a new mount refuses at once, without a scan.
  EXPECT_FALSE(ListDir(CacheDir() + "/views").empty());
  const size_t log_before = Log().size();
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  EXPECT_EQ(ListDir(mountpoint()), left);
  ExpectNotFound("p.q4k.apr");
  EXPECT_EQ(ViewStatus("p", "q4k").value("state", ""), "refused");
  EXPECT_EQ(Log().substr(log_before).find("checking the values"), std::string::npos)
      << "scanned again";
}

// make_model.py args of a single-file `preset` with these --poison NAME:KIND.
std::vector<std::string> SingleFile(const std::string& preset,
                                    const std::vector<std::string>& poisons) {
  std::vector<std::string> args = {"--preset", preset, "--layout", "single"};
  for (const std::string& poison : poisons) args.insert(args.end(), {"--poison", poison});
  return args;
}

// Two tensors poisoned: the first in name order is the one named.
const std::string kLaterTensor = "model.layers.1.mlp.down_proj.weight:";
const std::string kFirstTensor = "model.layers.0.self_attn.q_proj.weight:";

INSTANTIATE_TEST_SUITE_P(
    ViewPoisons, ViewPoisonTest,
    ::testing::Values(
        PoisonCase{"nan", SingleFile("quant-tiny", {kLaterTensor + "nan", kFirstTensor + "nan"}),
                   "NaN"},
        PoisonCase{"inf", SingleFile("quant-tiny", {kLaterTensor + "inf", kFirstTensor + "inf"}),
                   "infinite"},
        PoisonCase{"mean",
                   SingleFile("quant-tiny", {kLaterTensor + "mean", kFirstTensor + "mean"}),
                   "beyond +-100"},
        PoisonCase{"norm_mean", SingleFile("quant-tiny", {"model.norm.weight:mean"}),
                   "beyond +-100"},
        PoisonCase{"fp8_nan_code",
                   SingleFile("fp8-tiny", {"model.layers.1.mlp.experts.0.up_proj.weight:nan"}),
                   "NaN"},
        // An infinite block scale makes the block's zero codes 0 x Inf = NaN, found first.
        PoisonCase{"fp8_inf_scale",
                   SingleFile("fp8-tiny", {"model.layers.0.mlp.down_proj.weight_scale_inv:inf"}),
                   "NaN"},
        PoisonCase{"fp8_mean",
                   SingleFile("fp8-tiny", {"model.layers.0.self_attn.o_proj.weight:mean"}),
                   "beyond +-100"}),
    [](const auto& info) { return info.param.name; });

TEST_F(ViewRefusalTest, RewrittenSingleFileModelIsCheckedAgainNotJudgedByTheOldVerdict) {
  SetWatchdog(180s);
  const std::vector<std::string> clean = SingleFile("quant-tiny", {});
  const std::vector<std::string> poisoned =
      SingleFile("quant-tiny", {"model.layers.0.mlp.up_proj.weight:nan"});
  ASSERT_NO_FATAL_FAILURE(MakeModel("p", poisoned));
  ASSERT_NO_FATAL_FAILURE(MountViews());
  EXPECT_EQ(OpenErrno("p.q4k.apr"), EIO);
  // The model is fixed while mounted: its new version is scanned on the next open, and served.
  ASSERT_NO_FATAL_FAILURE(MakeModel("p", clean));
  const std::string want = ExpectedBytes("p", "q4k");
  std::string got, error;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!ReadWholeFile(MP("p.q4k.apr"), &got, &error) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(FirstDifference(got, want), std::nullopt) << "last error: " << error;
  EXPECT_EQ(ViewStatus("p", "q4k").value("state", ""), "ready");
  UnmountCleanly();
  // And a new mount keeps to the new verdict.
  ASSERT_NO_FATAL_FAILURE(MountViews());
  EXPECT_TRUE(ReadWholeFile(MP("p.q4k.apr"), &got, &error)) << error;
  EXPECT_EQ(FirstDifference(got, want), std::nullopt);
}

TEST_F(ViewRefusalTest, Int4DensityRuleRefusesOnlyTheInt4ViewOfASingleFileModel) {
  SetWatchdog(180s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("z", {"--preset", "quant-tiny", "--layout", "single",
                                          "--zero-tensor", "model.layers.0.mlp.up_proj.weight"}));
  PrepareReferences(EveryQuantizedView({"z"}));
  ASSERT_TRUE(Reference("z", "int4").refused()) << Reference("z", "int4").message;
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  EXPECT_EQ(OpenErrno("z.int4.apr"), EIO);
  EXPECT_NE(Log().find("z.int4.apr: aprender's import refuses this model: tensor "
                       "'model.layers.0.mlp.up_proj.weight'"),
            std::string::npos)
      << Log();
  EXPECT_NE(Log().find("Q4 DENSITY VIOLATION"), std::string::npos);
  for (const char* view : {"q4k", "f16", "int8"}) ExpectServed("z", view);
  EXPECT_EQ(ListDir(mountpoint()),
            (std::vector<std::string>{"z.apr", "z.f16.apr", "z.int8.apr", "z.q4k.apr",
                                      "z.safetensors"}));
  EXPECT_EQ(ViewStatus("z", "int4").value("state", ""), "refused");
  EXPECT_EQ(ViewStatus("z", "int8").value("state", ""), "ready");
  EXPECT_TRUE(BecomesAbsent("z.int4.apr"));
}

TEST_F(ViewRefusalTest, ShardedModelIsNotValueCheckedAndItsPoisonReachesTheEncoders) {
  SetWatchdog(180s);
  // The same poison, density and zero head as above, on path H: every view is written (NaN and
  // Inf go through the encoders as aprender's do), the head is not tied.
  ASSERT_NO_FATAL_FAILURE(MakeModel(
      "h", {"--preset", "quant-tiny", "--poison", "model.layers.0.self_attn.q_proj.weight:nan",
            "--poison", "model.layers.1.mlp.down_proj.weight:inf", "--poison",
            "model.layers.0.self_attn.k_proj.weight:mean", "--zero-tensor",
            "model.layers.0.mlp.up_proj.weight", "--zero-lm-head"}));
  PrepareReferences(EveryQuantizedView({"h"}));
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  for (const std::string& view : kQuantizedViews) {
    SCOPED_TRACE(view);
    ExpectViewBytes(MP(ViewFileName("h", view)), ExpectedBytes("h", view));
    EXPECT_EQ(ViewStatus("h", view).value("state", ""), "ready");
  }
  EXPECT_EQ(Log().find("refuses"), std::string::npos) << Log();
  EXPECT_FALSE(std::filesystem::exists(CacheDir() + "/views")) << "a sharded model was scanned";
}

TEST_F(ViewRefusalTest, ModelWithIntegerTensorsHasNoQuantizedViewsButItsApr) {
  SetWatchdog(120s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("e", {"--preset", "edge"}));
  PrepareReferences(EveryQuantizedView({"e"}));
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  // The merged safetensors copies the shards' bytes, whatever their dtypes.
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"e.apr", "e.safetensors"}));
  for (const std::string& view : kQuantizedViews) {
    SCOPED_TRACE(view);
    EXPECT_TRUE(Reference("e", view).refused()) << Reference("e", view).message;
    ExpectNotFound(ViewFileName("e", view));
    nlohmann::json status = ViewStatus("e", view);
    EXPECT_EQ(status.value("state", ""), "refused") << status.dump(2);
    EXPECT_NE(status.value("error", "").find("tensor '" + RefusedTensor(Reference("e", view)) + "'"),
              std::string::npos)
        << status.dump(2) << "\napr_views.py: " << Reference("e", view).message;
  }
  ExpectPlainAprValid("e");
}

TEST_F(ViewRefusalTest, Fp8WeightWithoutItsScalesRejectsTheWholeModelNamingTensorAndRule) {
  SetWatchdog(120s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const std::string weight = "model.layers.0.mlp.down_proj.weight";
  tw::TestModel no_scale;
  no_scale.shards = {{tw::MakeTensor("model.embed_tokens.weight", "BF16", {16, 8}),
                      tw::MakeTensor(weight, "F8_E4M3", {200, 130})}};
  tw::WriteModel(Model("noscale"), no_scale);
  tw::TestModel bad_shape = no_scale;  // [200, 130] in 128 x 128 blocks needs [2, 2] scales
  bad_shape.shards[0].push_back(tw::MakeTensor(weight + "_scale_inv", "F32", {1, 2}));
  tw::WriteModel(Model("badshape"), bad_shape);

  ProcResult ls = RunAprfs({"ls", "--json", "--no-hf-cache", "--source", models_dir(),
                            "--cache-dir", CacheDir()});
  EXPECT_EQ(ls.exit_code, 0) << ls.Describe();
  nlohmann::json listed = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(listed.is_array()) << ls.Describe();
  std::map<std::string, nlohmann::json> by_path;
  for (const nlohmann::json& model : listed) by_path[model["paths"][0]] = model;
  ASSERT_EQ(by_path.size(), 3u) << ls.out;
  EXPECT_TRUE(by_path["qt.apr"].value("ok", false));
  const std::map<std::string, std::string> rules = {
      {"noscale.apr", "'" + weight + "_scale_inv'"}, {"badshape.apr", "have shape [1, 2]"}};
  for (const auto& [path, rule] : rules) {
    const nlohmann::json& model = by_path[path];
    EXPECT_FALSE(model.value("ok", true)) << model.dump(2);
    const std::string error = model.value("error", "");
    EXPECT_NE(error.find("tensor '" + weight + "'"), std::string::npos) << error;
    EXPECT_NE(error.find(rule), std::string::npos) << error;
  }
  ProcResult table = RunAprfs({"ls", "--no-hf-cache", "--source", models_dir(), "--cache-dir",
                               CacheDir()});
  EXPECT_NE(table.out.find("rejected: "), std::string::npos) << table.Describe();

  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  EXPECT_EQ(ListDir(mountpoint()).size(), 6u) << "only qt's files";
  for (const char* model : {"noscale", "badshape"}) {
    for (const char* view : {"apr", "q4k", "f16", "safetensors"}) {
      ExpectNotFound(ViewFileName(model, view));
    }
  }
  nlohmann::json status = Status();
  for (const nlohmann::json& model : status["models"]) {
    const std::string path = model["names"].empty() ? "" : model["names"][0].get<std::string>();
    if (!rules.count(path)) continue;
    EXPECT_EQ(model.value("state", ""), "error") << model.dump(2);
    EXPECT_EQ(model.value("error", ""), by_path[path].value("error", "")) << "status and ls agree";
  }
  // The reference writer refuses such models too.
  for (const char* model : {"noscale", "badshape"}) {
    ViewReference ref = RunReferenceWriter(Model(model), model, "q4k", work_dir() + "/ref.apr");
    EXPECT_TRUE(ref.refused()) << model << ": " << ref.message;
  }
}

// ----- the tied head of single-file models ----------------------------------------------------

TEST_F(ViewRefusalTest, ZeroLmHeadOfASingleFileModelIsTiedAndCatJustWorks) {
  SetWatchdog(180s);
  ASSERT_NO_FATAL_FAILURE(
      MakeModel("zh", {"--preset", "quant-tiny", "--layout", "single", "--zero-lm-head"}));
  PrepareReferences(EveryQuantizedView({"zh"}));
  const std::string want = ExpectedBytes("zh", "q4k");
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  struct stat before, after;
  ASSERT_EQ(stat(MP("zh.q4k.apr").c_str(), &before), 0) << std::strerror(errno);

  // The first open learns that the head is all zeros: ESTALE inside, and the kernel's retry
  // with a fresh lookup finds the tied file.
  ProcResult cat = RunCommand({"cat", MP("zh.q4k.apr")});
  ASSERT_EQ(cat.exit_code, 0) << cat.Describe();
  EXPECT_EQ(FirstDifference(cat.out, want), std::nullopt);
  EXPECT_EQ(cat.out.size(), want.size());
  ASSERT_EQ(stat(MP("zh.q4k.apr").c_str(), &after), 0) << std::strerror(errno);
  EXPECT_NE(after.st_ino, before.st_ino) << "the tied file has a new inode";
  EXPECT_EQ(static_cast<uint64_t>(after.st_size), want.size());
  EXPECT_NE(Log().find("planned again"), std::string::npos);
  for (const std::string& view : kQuantizedViews) {
    SCOPED_TRACE(view);
    ExpectViewBytes(MP(ViewFileName("zh", view)), ExpectedBytes("zh", view));
    EXPECT_EQ(ViewStatus("zh", view).value("state", ""), "ready");
  }
  UnmountCleanly();

  // With the verdict kept, a new mount plans the tied file from the start.
  const size_t log_before = Log().size();
  ASSERT_NO_FATAL_FAILURE(MountViews());
  cat = RunCommand({"cat", MP("zh.q4k.apr")});
  ASSERT_EQ(cat.exit_code, 0) << cat.Describe();
  EXPECT_EQ(FirstDifference(cat.out, want), std::nullopt);
  EXPECT_EQ(Log().substr(log_before).find("planned again"), std::string::npos);
}

}  // namespace
}  // namespace aprfs_itest
