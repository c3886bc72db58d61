// What a mount says about each view: the `views` of status.json, the aprfs_view_* metrics and
// the user.aprfs.* xattrs of a view file agree with each other and with what the test read.
// O_DIRECT reads reach the daemon whatever the page cache holds, so byte counts are exact.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tests/integration/prometheus_check.h"
#include "tests/integration/view_fixture.h"

namespace aprfs_itest {
namespace {

using nlohmann::json;

// Every extended attribute of a file, through listxattr/getxattr.
std::map<std::string, std::string> Xattrs(const std::string& path) {
  std::map<std::string, std::string> attrs;
  std::string names(65536, '\0');
  ssize_t length = listxattr(path.c_str(), names.data(), names.size());
  EXPECT_GE(length, 0) << path << ": " << std::strerror(errno);
  for (size_t at = 0; length > 0 && at < static_cast<size_t>(length);) {
    const std::string name = names.c_str() + at;
    at += name.size() + 1;
    std::string value(4096, '\0');
    ssize_t n = getxattr(path.c_str(), name.c_str(), value.data(), value.size());
    EXPECT_GE(n, 0) << name << ": " << std::strerror(errno);
    attrs[name] = value.substr(0, n < 0 ? 0 : static_cast<size_t>(n));
  }
  return attrs;
}

class ViewStatusTest : public ViewTest {
 protected:
  // The whole view through O_DIRECT, compared with its reference; returns its size.
  uint64_t ReadViewOnce(const std::string& model, const std::string& view) {
    std::string got, error;
    EXPECT_TRUE(ReadDirect(MP(ViewFileName(model, view)), &got, &error)) << error;
    EXPECT_EQ(FirstDifference(got, ExpectedBytes(model, view)), std::nullopt);
    return got.size();
  }

  PromParse Metrics() {
    PromParse metrics = ParsePrometheusText(SlurpOrEmpty(MP(".aprfs/metrics")));
    EXPECT_EQ(metrics.problems, std::vector<std::string>{});
    return metrics;
  }

  // Every aprfs_view_* sample of the view equals its status.json figure.
  void ExpectMetricsMatch(const PromParse& metrics, const std::string& model,
                          const std::string& view, const json& status) {
    SCOPED_TRACE("metrics of " + model + " " + view);
    const std::map<std::string, std::string> labels = {{"model", model + ".apr"}, {"view", view}};
    const std::map<std::string, std::string> counters = {
        {"aprfs_view_read_bytes_total", "bytes_read"},
        {"aprfs_view_computed_bytes_total", "bytes_computed"},
        {"aprfs_view_encoded_source_bytes_total", "source_bytes_encoded"},
        {"aprfs_view_cache_hits_total", "cache_hits"},
        {"aprfs_view_cache_misses_total", "cache_misses"}};
    for (const auto& [family, field] : counters) {
      EXPECT_EQ(metrics.types.count(family) ? metrics.types.at(family) : "", "counter") << family;
      EXPECT_EQ(metrics.Value(family, labels), status.value(field, -1.0)) << family;
    }
    EXPECT_NEAR(metrics.Value("aprfs_view_encode_seconds_total", labels),
                status.value("encode_seconds", -1.0), 1e-6);
    if (status["cached_bytes"].is_null()) {
      EXPECT_TRUE(std::isnan(metrics.Value("aprfs_view_cached_bytes", labels)));
    } else {
      EXPECT_EQ(metrics.types.at("aprfs_view_cached_bytes"), "gauge");
      EXPECT_EQ(metrics.Value("aprfs_view_cached_bytes", labels), status.value("cached_bytes", -1.0));
    }
  }

  // The view file's xattrs equal its status.json figures.
  void ExpectXattrsMatch(const std::string& model, const std::string& view, const json& status) {
    SCOPED_TRACE("xattrs of " + model + " " + view);
    std::map<std::string, std::string> attrs = Xattrs(MP(ViewFileName(model, view)));
    EXPECT_EQ(attrs["user.aprfs.view"], view);
    EXPECT_EQ(attrs["user.aprfs.size"], std::to_string(status.value("size", uint64_t{0})));
    for (const char* field : {"bytes_read", "bytes_computed", "cache_hits", "cache_misses"}) {
      EXPECT_EQ(attrs["user.aprfs." + std::string(field)],
                std::to_string(status.value(field, uint64_t{0})))
          << field;
    }
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.1f", status.value("encode_bytes_per_second", 0.0) / 1e6);
    EXPECT_EQ(attrs["user.aprfs.encode_mb_per_s"], rate);
    if (status["cached_bytes"].is_null()) {
      EXPECT_EQ(attrs.count("user.aprfs.computed_cached_bytes"), 0u);
    } else {
      EXPECT_EQ(attrs["user.aprfs.computed_cached_bytes"],
                std::to_string(status.value("cached_bytes", uint64_t{0})));
    }
  }
};

TEST_F(ViewStatusTest, StatusMetricsAndXattrsOfAViewAgreeWithWhatWasRead) {
  SetWatchdog(180s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const uint64_t size = ExpectedBytes("qt", "q4k").size();
  ASSERT_NO_FATAL_FAILURE(MountViews());

  // Looked up: the .apr and the q4k view are planned, the others not.
  struct stat st;
  ASSERT_EQ(stat(MP("qt.q4k.apr").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  json views, status = Status();
  for (const json& model : status["models"]) {
    if (model.value("name", "") == "qt.apr") views = model["views"];
  }
  ASSERT_EQ(views.size(), 12u) << views.dump(2);
  const std::vector<std::string> names = {"apr",      "q4k",       "f16",      "int8",
                                          "int4",     "safetensors", "gguf",   "gguf-f16",
                                          "gguf-bf16", "gguf-f32", "gguf-q8_0", "gguf-q4_k_m"};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(views[i].value("view", ""), names[i]);
    EXPECT_EQ(views[i].value("file", ""), ViewFileName("qt", names[i]));
    EXPECT_EQ(views[i].value("state", ""), i < 2 ? "ready" : "not-planned") << views[i].dump(2);
    EXPECT_EQ(views[i]["size"].is_null(), i >= 2) << views[i].dump(2);
    EXPECT_TRUE(views[i]["error"].is_null());
    for (const char* zero : {"bytes_read", "bytes_computed", "cache_hits", "cache_misses"}) {
      EXPECT_EQ(views[i].value(zero, uint64_t{1}), 0u) << names[i] << " " << zero;
    }
  }
  EXPECT_EQ(views[0].value("size", uint64_t{0}), FileSize(MP("qt.apr")));
  EXPECT_EQ(views[1].value("size", uint64_t{0}), size);
  EXPECT_EQ(views[1].value("cached_bytes", uint64_t{1}), 0u) << "an empty store";
  PromParse metrics = Metrics();
  EXPECT_EQ(metrics.Value("aprfs_view_read_bytes_total", {{"model", "qt.apr"}, {"view", "q4k"}}), 0);
  EXPECT_TRUE(std::isnan(
      metrics.Value("aprfs_view_read_bytes_total", {{"model", "qt.apr"}, {"view", "f16"}})))
      << "a view never planned has no series";

  // One read of every byte: counted once, computed once, stored.
  EXPECT_EQ(ReadViewOnce("qt", "q4k"), size);
  json q4k = ViewStatus("qt", "q4k");
  EXPECT_EQ(q4k.value("bytes_read", uint64_t{0}), size) << q4k.dump(2);
  EXPECT_GE(q4k.value("reads", uint64_t{0}), 1u);
  const uint64_t computed = q4k.value("bytes_computed", uint64_t{0});
  EXPECT_GT(computed, 0u);
  EXPECT_LE(computed, size);
  const uint64_t encoded = q4k.value("source_bytes_encoded", uint64_t{0});
  EXPECT_GT(encoded, computed) << "q4k is smaller than its BF16 source";
  EXPECT_GT(q4k.value("encode_seconds", 0.0), 0.0);
  EXPECT_NEAR(q4k.value("encode_bytes_per_second", 0.0) * q4k.value("encode_seconds", 0.0),
              static_cast<double>(encoded), 1e-6 * static_cast<double>(encoded));
  EXPECT_EQ(q4k.value("cache_misses", uint64_t{0}), 1u) << "one 4 MiB chunk";
  const uint64_t stored = q4k.value("cache_stored_bytes", uint64_t{0});
  EXPECT_EQ(q4k.value("cached_bytes", uint64_t{0}), stored);
  EXPECT_LE(stored, size);
  EXPECT_GE(stored + 4, size) << "all but the footer";
  EXPECT_EQ(ViewFigure("qt", "apr", "bytes_read"), 0u) << "the .apr was not read";
  EXPECT_EQ(ViewFigure("qt", "f16", "bytes_read"), 0u);
  ExpectMetricsMatch(Metrics(), "qt", "q4k", q4k);
  ExpectXattrsMatch("qt", "q4k", q4k);

  // Again: served from the store, nothing computed.
  EXPECT_EQ(ReadViewOnce("qt", "q4k"), size);
  json again = ViewStatus("qt", "q4k");
  EXPECT_EQ(again.value("bytes_read", uint64_t{0}), 2 * size);
  EXPECT_EQ(again.value("bytes_computed", uint64_t{0}), computed);
  EXPECT_EQ(again.value("cache_misses", uint64_t{0}), 1u);
  EXPECT_GT(again.value("cache_hits", uint64_t{0}), q4k.value("cache_hits", uint64_t{0}));
  ExpectMetricsMatch(Metrics(), "qt", "q4k", again);
  ExpectXattrsMatch("qt", "q4k", again);

  // The .apr's xattrs are the model's, with its view name.
  json apr = ViewStatus("qt", "apr");
  ExpectXattrsMatch("qt", "apr", apr);
  EXPECT_EQ(Xattrs(MP("qt.apr"))["user.aprfs.size"], std::to_string(FileSize(MP("qt.apr"))));
}

TEST_F(ViewStatusTest, WithoutTheViewCacheEveryReadIsComputedAndNothingIsCached) {
  SetWatchdog(180s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  const uint64_t size = ExpectedBytes("qt", "int8").size();
  ASSERT_NO_FATAL_FAILURE(MountViews({"--no-view-cache"}));
  EXPECT_EQ(ReadViewOnce("qt", "int8"), size);
  const uint64_t computed = ViewFigure("qt", "int8", "bytes_computed");
  EXPECT_GT(computed, 0u);
  EXPECT_EQ(ReadViewOnce("qt", "int8"), size);
  json int8 = ViewStatus("qt", "int8");
  EXPECT_EQ(int8.value("bytes_read", uint64_t{0}), 2 * size);
  EXPECT_EQ(int8.value("bytes_computed", uint64_t{0}), 2 * computed);
  for (const char* zero : {"cache_hits", "cache_misses", "cache_stored_bytes"}) {
    EXPECT_EQ(int8.value(zero, uint64_t{1}), 0u) << zero;
  }
  EXPECT_TRUE(int8["cached_bytes"].is_null()) << int8.dump(2);
  ExpectMetricsMatch(Metrics(), "qt", "int8", int8);
  ExpectXattrsMatch("qt", "int8", int8);
}

TEST_F(ViewStatusTest, SingleFileViewIsUncheckedUntilItsFirstOpenThenReady) {
  SetWatchdog(180s);
  ASSERT_NO_FATAL_FAILURE(MakeModel("qs", {"--preset", "quant-tiny", "--layout", "single"}));
  ASSERT_NO_FATAL_FAILURE(MountViews());
  EXPECT_GT(FileSize(MP("qs.q4k.apr")), 0u);
  EXPECT_EQ(ViewStatus("qs", "q4k").value("state", ""), "unchecked");
  EXPECT_EQ(ViewStatus("qs", "apr").value("state", ""), "ready") << "the .apr is never checked";
  EXPECT_EQ(ReadViewOnce("qs", "q4k"), ExpectedBytes("qs", "q4k").size());
  EXPECT_EQ(ViewStatus("qs", "q4k").value("state", ""), "ready");
  // One scan serves every view: int8 is ready as soon as it is planned.
  EXPECT_GT(FileSize(MP("qs.int8.apr")), 0u);
  EXPECT_EQ(ViewStatus("qs", "int8").value("state", ""), "ready");
}

}  // namespace
}  // namespace aprfs_itest
