// The bytes of the computed views: every view of generated models (sharded and single-file,
// BF16/F16/F32 weights, FP8 weights with F32 or E8M0 block scales) read through read(), O_DIRECT
// pread at odd offsets and mmap equals what the independent reference writer apr_views.py says
// `apr import --quantize` writes (the merged .safetensors: what merged_safetensors.py writes),
// with the computed cache on and off; the plain .apr of FP8
// models holds the weights dequantized (aprcheck.py --source); a copy of a view is a valid APR
// file for `aprfs inspect` and aprcheck.py.
#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "tests/integration/view_fixture.h"

namespace aprfs_itest {
namespace {

struct ModelCase {
  std::string name;
  std::vector<std::string> make_model_args;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

std::vector<ModelCase> ModelCases() {
  return {
      {"quant_tiny_sharded", {"--preset", "quant-tiny"}},
      {"quant_tiny_single_file", {"--preset", "quant-tiny", "--layout", "single"}},
      {"quant_tiny_no_index", {"--preset", "quant-tiny", "--layout", "noindex"}},
      {"quant_tiny_f16_weights", {"--preset", "quant-tiny", "--weights-dtype", "F16"}},
      {"quant_tiny_f32_weights", {"--preset", "quant-tiny", "--weights-dtype", "F32"}},
      {"quant_tiny_f32_weights_single_file",
       {"--preset", "quant-tiny", "--weights-dtype", "F32", "--layout", "single"}},
      {"tiny_random_bits", {"--preset", "tiny"}},
      {"llama_tiny_tied_embeddings", {"--preset", "llama-tiny"}},
      {"llama_tiny_tied_f16_embeddings", {"--preset", "llama-tiny", "--weights-dtype", "F16"}},
      {"llama_tiny_tied_single_file", {"--preset", "llama-tiny", "--layout", "single"}},
      {"fp8_tiny_sharded", {"--preset", "fp8-tiny"}},
      {"fp8_tiny_single_file", {"--preset", "fp8-tiny", "--layout", "single"}},
      {"fp8_tiny_e8m0_scales", {"--preset", "fp8-tiny", "--fp8-scale-dtype", "F8_E8M0"}},
  };
}

class ViewBytesTest : public ViewTest, public ::testing::WithParamInterface<ModelCase> {
 protected:
  // Every quantized view equals its reference; the .apr passes aprcheck.py --source (`how`:
  // through pread, or --mmap).
  void ExpectEveryView(const std::string& model, const std::vector<std::string>& how) {
    std::vector<std::string> views = kQuantizedViews;
    views.push_back("safetensors");
    for (const std::string& view : views) {
      SCOPED_TRACE("view " + view);
      ExpectViewBytes(MP(ViewFileName(model, view)), ExpectedBytes(model, view));
    }
    ProcResult check = RunAprcheck(MP(model + ".apr"), Model(model), how);
    EXPECT_EQ(check.exit_code, 0) << "aprcheck.py --source on the mounted .apr: "
                                  << check.Describe();
  }
};

TEST_P(ViewBytesTest, EveryViewEqualsTheReferenceWriterThroughReadDirectIoAndMmap) {
  SetWatchdog(240s);
  const std::string model = "model";
  ASSERT_NO_FATAL_FAILURE(MakeModel(model, GetParam().make_model_args));
  std::vector<std::pair<std::string, std::string>> references = EveryQuantizedView({model});
  references.emplace_back(model, "safetensors");
  PrepareReferences(references);

  // With the computed cache: the first request computes (and stores) the chunk, later ones
  // are served from the store.
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "apr,q4k,f16,int8,int4,safetensors"}));
  EXPECT_EQ(ListDir(mountpoint()),
            (std::vector<std::string>{"model.apr", "model.f16.apr", "model.int4.apr",
                                      "model.int8.apr", "model.q4k.apr", "model.safetensors"}));
  ExpectEveryView(model, {});
  UnmountCleanly();

  // Without it: every request, at whatever odd offset, is encoded from the sources.
  ASSERT_NO_FATAL_FAILURE(MountViews({"--no-view-cache"}));
  ExpectEveryView(model, {"--mmap"});
}

INSTANTIATE_TEST_SUITE_P(ViewModels, ViewBytesTest, ::testing::ValuesIn(ModelCases()),
                         [](const auto& info) { return info.param.name; });

class ViewCopyTest : public ViewTest {};

TEST_F(ViewCopyTest, CopiedViewsPassAprfsInspectAndAprcheckWithACorrectFooter) {
  SetWatchdog(240s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  ASSERT_NO_FATAL_FAILURE(MakeModel("f8", {"--preset", "fp8-tiny", "--layout", "single"}));
  const auto wanted = EveryQuantizedView({"qt", "f8"});
  PrepareReferences(wanted);
  ASSERT_NO_FATAL_FAILURE(MountViews());

  for (const auto& [model, view] : wanted) {
    SCOPED_TRACE(model + "." + view);
    const std::string file = ViewFileName(model, view);
    const std::string copy = work_dir() + "/" + file;
    ProcResult cp = RunCommand({"cp", MP(file), copy});
    ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
    const std::string bytes = SlurpOrEmpty(copy);
    EXPECT_EQ(FirstDifference(bytes, ExpectedBytes(model, view)), std::nullopt);
    ASSERT_GT(bytes.size(), 4u);

    ProcResult inspect = RunAprfs({"inspect", "--json", copy});
    EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
    nlohmann::json report = nlohmann::json::parse(inspect.out, nullptr, false);
    ASSERT_FALSE(report.is_discarded()) << inspect.Describe();
    EXPECT_EQ(report.value("errors", nlohmann::json::array()), nlohmann::json::array());
    // The footer is the CRC32 of every byte before it, computed here independently.
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4)));
    char expected_footer[32];
    std::snprintf(expected_footer, sizeof expected_footer, "ok 0x%08X", crc);
    EXPECT_EQ(report.value("footer", ""), expected_footer);
    EXPECT_EQ(report["header"].value("tensor_count", 0u), report["index"].size());

    ProcResult check = RunAprcheck(copy, "", {"--json"});
    EXPECT_EQ(check.exit_code, 0) << check.Describe();
    nlohmann::json checked = nlohmann::json::parse(check.out, nullptr, false);
    ASSERT_FALSE(checked.is_discarded()) << check.Describe();
    EXPECT_EQ(checked.value("footer", ""), "ok");
    EXPECT_EQ(checked.value("tensors", 0u), report["index"].size());
  }
}

}  // namespace
}  // namespace aprfs_itest
