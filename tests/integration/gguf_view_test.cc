// The GGUF views, checked by llama.cpp itself (node-llama-cpp's prebuilt CPU build) and parsed
// by @huggingface/gguf: every outtype of generated Qwen2-, Qwen3-, Llama-3-, Llama-2-
// (SentencePiece tokenizer.model), Phi-4-, Phi-4-mini- (partial rotary, long-context RoPE
// factors, o200k pre-tokenizer), Gemma-2- and Gemma-3-shaped models loads through the
// mount, tokenizes and detokenizes a text back to itself, and its logits for that text match an
// independent forward pass of the safetensors model (tests/tools/reference_forward.py,
// transformers' definition: a wrong Q/K row permutation, RoPE factor, bias, norm offset or
// conversion moves them by far more than the tolerances). Plus: every read path gives the same
// bytes, the listing, and refusals.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "format/gguf/gguf_reader.h"
#include "tests/integration/view_fixture.h"

namespace aprfs_itest {
namespace {

using nlohmann::json;

struct GgufCase {
  std::string name;
  std::string preset;
  std::string architecture;
  size_t tensors;  // what llama.cpp counts
};

void PrintTo(const GgufCase& c, std::ostream* os) { *os << c.name; }

// An English sentence with the pieces pre-tokenizers treat apart: contractions, digit runs,
// punctuation, a newline and a tab.
const char kText[] = "Hello world, it's 12345 tokens!\n\tNew line";

class GgufViewTest : public ViewTest, public ::testing::WithParamInterface<GgufCase> {
 protected:
  // llama_cpp_run.mjs on a mounted view: tokens, detokenization, tensors, logits.
  json RunLlamaCpp(const std::string& path) {
    ProcResult r = RunCommand({"node", ToolsDir() + "/llama_cpp_run.mjs", path, kText}, 120s);
    EXPECT_EQ(r.exit_code, 0) << "llama.cpp did not load " << path << ": " << r.Describe();
    json out = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(out.is_object()) << r.Describe();
    return out.is_object() ? out : json::object();
  }

  // The reference logits for `tokens`, from the shards.
  json ReferenceLogits(const std::string& model, const json& tokens) {
    std::vector<std::string> argv = {"python3", ToolsDir() + "/reference_forward.py", Model(model)};
    for (const json& t : tokens) argv.push_back(std::to_string(t.get<int64_t>()));
    ProcResult r = RunCommand(argv, 120s);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    json out = json::parse(r.out, nullptr, false);
    return out.is_object() ? out["logits"] : json::array();
  }
};

// The largest difference between two logit tables, relative to the reference's spread.
double RelativeDifference(const json& got, const json& want) {
  double max_diff = 0, sum = 0, sum2 = 0;
  size_t n = 0;
  for (size_t row = 0; row < want.size(); ++row) {
    for (size_t i = 0; i < want[row].size(); ++i) {
      const double w = want[row][i].get<double>();
      const double g = got[row][i].is_number() ? got[row][i].get<double>() : NAN;
      max_diff = std::max(max_diff, std::isnan(g) ? INFINITY : std::fabs(g - w));
      sum += w, sum2 += w * w, ++n;
    }
  }
  const double mean = sum / n;
  return max_diff / std::sqrt(sum2 / n - mean * mean);
}

TEST_P(GgufViewTest, LlamaCppLoadsEveryOuttypeAndItsLogitsMatchTheReference) {
  SetWatchdog(300s);
  const GgufCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(MakeModel("m", {"--preset", c.preset}));
  ASSERT_NO_FATAL_FAILURE(MountViews());
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"m.apr", "m.q4k.apr"}))
      << "GGUF views are not listed by default";

  json reference;
  // --outtype auto picks BF16 for these BF16 checkpoints. llama.cpp rounds matmul inputs to
  // the weight type and keeps its KV cache in F16: the tolerances say how far that may go
  // (measured, largest difference over the logits' spread: F32 0.016, F16 0.021, BF16 0.090,
  // Q8_0 0.32; with the Q/K rows left unpermuted: 4.9).
  const std::vector<std::pair<std::string, double>> files = {
      {"m.gguf", 0.3},     {"m.F32.gguf", 0.08}, {"m.F16.gguf", 0.08},
      {"m.BF16.gguf", 0.3}, {"m.Q8_0.gguf", 0.8}};
  for (const auto& [file, tolerance] : files) {
    SCOPED_TRACE(file);
    json run = RunLlamaCpp(MP(file));
    ASSERT_TRUE(run.contains("tokens")) << run.dump();
    EXPECT_EQ(run["architecture"], c.architecture);
    EXPECT_EQ(run["tensorCount"], c.tensors);
    // The Hub's own GGUF reader sees the same file: every tensor's name, shape, type, offset.
    ProcResult hub = RunCommand({"node", ToolsDir() + "/gguf_parse.mjs", MP(file)}, 60s);
    ASSERT_EQ(hub.exit_code, 0) << "@huggingface/gguf cannot parse " << file << ": " << hub.Describe();
    json parsed = json::parse(hub.out, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << hub.Describe();
    EXPECT_EQ(parsed["version"], 3);
    EXPECT_EQ(parsed["architecture"], c.architecture);
    EXPECT_EQ(parsed["tensors"], run["tensors"]) << "@huggingface/gguf and llama.cpp disagree";
    EXPECT_GT(run["tokens"].size(), 10u);
    EXPECT_EQ(run["detokenized"], kText) << "tokens " << run["tokens"].dump();
    if (reference.is_null()) reference = ReferenceLogits("m", run["tokens"]);
    ASSERT_EQ(reference.size(), run["tokens"].size());
    const double difference = RelativeDifference(run["logits"], reference);
    EXPECT_LT(difference, tolerance) << "logits differ from the reference forward pass";
    std::fprintf(stderr, "%s %s: logits within %.4f of the reference's spread\n",
                 c.name.c_str(), file.c_str(), difference);
  }
  // Every read path agrees on the bytes (row-gathered, converted pieces at odd offsets).
  for (const char* file : {"m.F16.gguf", "m.Q8_0.gguf"}) {
    std::string bytes, error;
    ASSERT_TRUE(ReadWholeFile(MP(file), &bytes, &error)) << error;
    ExpectViewBytes(MP(file), bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    GgufModels, GgufViewTest,
    ::testing::Values(GgufCase{"qwen2", "qwen2-tiny", "qwen2", 26},
                      GgufCase{"qwen3", "qwen3-tiny", "qwen3", 24},
                      GgufCase{"llama3", "llama3-tiny", "llama", 22},
                      GgufCase{"llama2", "llama2-tiny", "llama", 21},
                      GgufCase{"phi3", "phi3-tiny", "phi3", 15},
                      GgufCase{"phi4mini", "phi4mini-tiny", "phi3", 16},
                      GgufCase{"gemma2", "gemma2-tiny", "gemma2", 24},
                      GgufCase{"gemma3", "gemma3-tiny", "gemma3", 80}),
    [](const auto& info) { return info.param.name; });

// The GGUF file at `path`, as our reader (llama.cpp's rules) sees it, and its bytes.
aprfs::GgufFile ReadGguf(const std::string& path, std::string* bytes) {
  std::string error;
  EXPECT_TRUE(ReadWholeFile(path, bytes, &error)) << error;
  const std::string& b = *bytes;
  return aprfs::ReadGgufFile(
      [&b](uint64_t offset, uint64_t length) { return b.substr(offset, length); }, b.size(), path);
}

class GgufQuantizeTest : public GgufViewTest {};

// NAME.Q4_K_M.gguf is what llama.cpp's own llama-quantize (node-llama-cpp's libllama, through
// tests/tools/llama_quantize.py) makes of NAME.F16.gguf: the same KVs, tensor types and bytes
// (Qwen2, Llama 2 and Phi-3: Q5_0 and Q8_0 fallbacks, Qwen2's tied Q8_0 embedding; Llama 3 with rows of whole
// super-blocks over 8 layers: Q4_K, and Q6_K where use_more_bits picks). Byte for byte the same
// file, except that llama3's generated rope_freqs stays first (llama-quantize sorts it after
// output_norm): llama.cpp's logits must then be identical.
TEST_P(GgufQuantizeTest, Q4_K_MIsWhatLlamaQuantizeMakesOfTheF16View) {
  SetWatchdog(300s);
  const GgufCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(MakeModel("m", {"--preset", c.preset}));
  ASSERT_NO_FATAL_FAILURE(MountViews());
  const std::string quantized = root() + "/llama-quantize.gguf";
  ProcResult q = RunCommand({"python3", ToolsDir() + "/llama_quantize.py", MP("m.F16.gguf"),
                             quantized, "Q4_K_M"}, 120s);
  ASSERT_EQ(q.exit_code, 0) << q.Describe();
  std::string want, got;
  const aprfs::GgufFile theirs = ReadGguf(quantized, &want);
  const aprfs::GgufFile ours = ReadGguf(MP("m.Q4_K_M.gguf"), &got);
  EXPECT_TRUE(ours.problems.empty()) << ours.problems.front();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(ours.kv, theirs.kv);
  ASSERT_EQ(ours.tensors.size(), theirs.tensors.size());
  std::map<std::string, const aprfs::GgufTensorInfo*> by_name;
  for (const aprfs::GgufTensorInfo& t : theirs.tensors) by_name[t.name] = &t;
  std::set<uint32_t> types;
  for (const aprfs::GgufTensorInfo& t : ours.tensors) {
    SCOPED_TRACE(t.name);
    const aprfs::GgufTensorInfo* other = by_name[t.name];
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(t.ne, other->ne);
    EXPECT_EQ(aprfs::GgmlTypeNameById(t.type), aprfs::GgmlTypeNameById(other->type));
    ASSERT_TRUE(t.bytes && other->bytes && *t.bytes == *other->bytes);
    EXPECT_TRUE(got.compare(ours.data_start + t.offset, *t.bytes, want,
                            theirs.data_start + other->offset, *other->bytes) == 0)
        << "the tensor's bytes differ from llama-quantize's";
    types.insert(t.type);
  }
  if (c.preset != "llama3-kquant") {
    EXPECT_TRUE(got == want) << "not byte for byte llama-quantize's file";
    EXPECT_EQ(types, (std::set<uint32_t>{0, 6, 8}));  // F32, Q5_0, Q8_0
  } else {
    EXPECT_EQ(types, (std::set<uint32_t>{0, 12, 14}));  // F32, Q4_K, Q6_K
  }
  json run = RunLlamaCpp(MP("m.Q4_K_M.gguf"));
  json reference = RunLlamaCpp(quantized);
  ASSERT_TRUE(run.contains("logits") && reference.contains("logits"));
  ProcResult hub = RunCommand({"node", ToolsDir() + "/gguf_parse.mjs", MP("m.Q4_K_M.gguf")}, 60s);
  ASSERT_EQ(hub.exit_code, 0) << "@huggingface/gguf cannot parse it: " << hub.Describe();
  json parsed = json::parse(hub.out, nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << hub.Describe();
  EXPECT_EQ(parsed["tensors"], run["tensors"]) << "@huggingface/gguf and llama.cpp disagree";
  EXPECT_EQ(run["tokens"], reference["tokens"]);
  EXPECT_EQ(run["detokenized"], kText);
  EXPECT_EQ(run["logits"], reference["logits"]) << "llama.cpp computes other logits";
  // The computed chunks are kept: a second mount serves them from the cache.
  ASSERT_NO_FATAL_FAILURE(UnmountCleanly());
  ASSERT_NO_FATAL_FAILURE(MountViews());
  std::string again, error;
  ASSERT_TRUE(ReadWholeFile(MP("m.Q4_K_M.gguf"), &again, &error)) << error;
  EXPECT_TRUE(again == got);
  EXPECT_GT(ViewFigure("m", "gguf-q4_k_m", "cache_hits"), 0u);
  EXPECT_EQ(ViewFigure("m", "gguf-q4_k_m", "bytes_computed"), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    GgufModels, GgufQuantizeTest,
    ::testing::Values(GgufCase{"qwen2", "qwen2-tiny", "qwen2", 26},
                      GgufCase{"llama3", "llama3-kquant", "llama", 76},
                      GgufCase{"llama2", "llama2-tiny", "llama", 21},
                      GgufCase{"phi3", "phi3-tiny", "phi3", 15},
                      GgufCase{"gemma3", "gemma3-tiny", "gemma3", 80}),
    [](const auto& info) { return info.param.name; });

class GgufListingTest : public ViewTest {};

// Listed on request; a model whose architecture has no GGUF mapping has no GGUF view, nor has a
// Phi-3 whose vocabulary the converter would read with SentencePiece (no tokenizer_config.json
// naming GPT2Tokenizer) but has no tokenizer.model, and ls and the log say why.
TEST_F(GgufListingTest, ListedOnRequestAndRefusedWithTheReasonWhereUnmapped) {
  ASSERT_NO_FATAL_FAILURE(MakeModel("q", {"--preset", "qwen2-tiny"}));
  ASSERT_NO_FATAL_FAILURE(MakeModel("neox", {"--preset", "qwen2-tiny", "--seed", "7"}));
  ASSERT_NO_FATAL_FAILURE(MakeModel("phi", {"--preset", "phi4", "--sparse"}));
  const std::string config = models_dir() + "/neox/config.json";
  std::string text, error;
  ASSERT_TRUE(ReadWholeFile(config, &text, &error)) << error;
  const size_t at = text.find("Qwen2ForCausalLM");
  ASSERT_NE(at, std::string::npos);
  tw::WriteFile(config, text.replace(at, 16, "GPTNeoXForCausalLM"));
  ASSERT_EQ(unlink((models_dir() + "/phi/tokenizer_config.json").c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "gguf,gguf-f16,apr"}));
  EXPECT_EQ(ListDir(mountpoint()), (std::vector<std::string>{"neox.apr", "phi.apr", "q.F16.gguf",
                                                             "q.apr", "q.gguf"}));
  for (const char* name : {"neox.gguf", "phi.gguf", "phi.F16.gguf", "q.Q4_0.gguf", "q.f16.gguf",
                           "q.F16.apr"}) {
    struct stat st;
    errno = 0;
    EXPECT_NE(stat(MP(name).c_str(), &st), 0) << name << " resolves";
    EXPECT_EQ(errno, ENOENT) << name;
  }
  struct stat unlisted;
  EXPECT_EQ(stat(MP("q.Q4_K_M.gguf").c_str(), &unlisted), 0) << "an unlisted view resolves";
  const std::string unmapped = "neox.gguf: not offered: config.json: architecture "
                               "'GPTNeoXForCausalLM' has no GGUF mapping";
  const std::string sentencepiece = "phi.gguf: not offered: tokenizer.model: missing: the "
                                    "converter reads this model's vocabulary with SentencePiece";
  EXPECT_NE(Log().find(unmapped), std::string::npos) << Log();
  EXPECT_NE(Log().find(sentencepiece), std::string::npos) << Log();
  ProcResult ls = RunAprfs({"ls", "--no-hf-cache", "--source", models_dir(), "--cache-dir",
                            CacheDir()});
  EXPECT_EQ(ls.exit_code, 0) << ls.Describe();
  EXPECT_NE(ls.out.find("not offered: config.json: architecture 'GPTNeoXForCausalLM'"),
            std::string::npos)
      << ls.out;
  EXPECT_NE(ls.out.find("not offered: tokenizer.model: missing"),
            std::string::npos)
      << ls.out;
}

// aprfs inspect reads a mounted .gguf as llama.cpp's loader would, and names what it would
// refuse in a damaged copy; aprfs verify checks the views' structure (and the shards).
TEST_F(GgufListingTest, InspectReadsTheViewAndNamesWhatTheLoaderWouldRefuse) {
  ASSERT_NO_FATAL_FAILURE(MakeModel("q", {"--preset", "qwen2-tiny"}));
  ASSERT_NO_FATAL_FAILURE(MountViews());
  ProcResult mounted = RunAprfs({"inspect", "--json", MP("q.Q8_0.gguf")}, 60s);
  EXPECT_EQ(mounted.exit_code, 0) << mounted.Describe();
  json report = json::parse(mounted.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << mounted.Describe();
  EXPECT_EQ(report["valid"], true) << report["errors"];
  EXPECT_EQ(report["tensor_count"], 26);
  EXPECT_EQ(report["kv"]["general.architecture"], "qwen2");
  EXPECT_EQ(report["kv"]["general.file_type"], 7);
  EXPECT_EQ(report["kv"]["tokenizer.ggml.pre"], "qwen2");
  EXPECT_EQ(report["kv"]["tokenizer.ggml.tokens"]["count"], 320);

  // verify: the shards and the view's structure; a copy's structure.
  for (const char* view : {"q.gguf", "q.Q4_K_M.gguf", "q.safetensors"}) {
    ProcResult verify = RunAprfs({"verify", MP(view)}, 60s);
    EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
    EXPECT_NE(verify.out.find("structure ok"), std::string::npos) << verify.Describe();
    EXPECT_NE(verify.out.find("verdict: GOOD"), std::string::npos) << verify.Describe();
  }

  const std::string copy = work_dir() + "/q.gguf";
  ProcResult cp = RunCommand({"cp", MP("q.gguf"), copy}, 60s);
  ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
  EXPECT_EQ(RunAprfs({"inspect", copy}, 60s).exit_code, 0);
  EXPECT_EQ(RunAprfs({"verify", copy}, 60s).exit_code, 0);
  ASSERT_EQ(truncate(copy.c_str(), static_cast<off_t>(FileSize(copy) - 4096)), 0);
  ProcResult truncated = RunAprfs({"inspect", copy}, 60s);
  EXPECT_EQ(truncated.exit_code, 1) << truncated.Describe();
  EXPECT_NE(truncated.out.find("not within the file bounds"), std::string::npos)
      << truncated.Describe();
  ProcResult bad = RunAprfs({"verify", copy}, 60s);
  EXPECT_EQ(bad.exit_code, 1) << bad.Describe();
  EXPECT_NE(bad.out.find("verdict: BAD"), std::string::npos) << bad.Describe();
  {
    Fd fd(copy, O_RDWR);
    ASSERT_TRUE(fd.ok());
    const char version2[4] = {2, 0, 0, 0};
    ASSERT_EQ(pwrite(fd.get(), version2, 4, 4), 4);
  }
  ProcResult old = RunAprfs({"inspect", copy}, 60s);
  EXPECT_EQ(old.exit_code, 1);
  EXPECT_NE(old.out.find("GGUF version 2"), std::string::npos) << old.Describe();
}

}  // namespace
}  // namespace aprfs_itest
