// The control folder and the status figures without a mount: Namespace's `.aprfs/` inodes, the
// states a model goes through, counters that survive a rebuild, the rendered JSON and metrics.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "fs/catalog.h"
#include "fs/namespace.h"
#include "fs/status_render.h"
#include "tests/integration/prometheus_check.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class StatusSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);  // the broken model is logged on purpose
    testing::WriteModel(dir_ / "good", testing::LlamaLikeModel(1, 2, true, 5));
    testing::WriteFile(dir_ / "bad/model.safetensors", "not a safetensors file");
  }
  void TearDown() override { spdlog::set_level(log_level_); }

  CatalogOptions Options() const {
    CatalogOptions options;
    options.sources = {dir_.path()};
    options.rescan_interval = std::chrono::milliseconds(0);
    return options;
  }

  static json Model(const json& status, const std::string& key) {
    for (const json& model : status["models"]) {
      if (model["key"] == key) return model;
    }
    ADD_FAILURE() << "no " << key << " in " << status.dump(2);
    return json::object();
  }

  testing::TempDir dir_;
  spdlog::level::level_enum log_level_;
};

TEST_F(StatusSnapshotTest, ControlFolderIsFoundButNeverListed) {
  Catalog catalog(Options());
  Namespace ns(catalog);
  ns.SetMountpoint("/mnt/models");
  auto root = ns.List(Namespace::kRootInode);
  ASSERT_TRUE(root.has_value());
  for (const auto& entry : *root) EXPECT_NE(entry.name, ".aprfs");

  auto control = ns.Lookup(Namespace::kRootInode, ".aprfs");
  ASSERT_TRUE(control.has_value());
  EXPECT_TRUE(control->is_dir);
  auto entries = ns.List(control->inode);
  ASSERT_TRUE(entries.has_value());
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "status.json");
  EXPECT_EQ((*entries)[1].name, "metrics");
  EXPECT_FALSE(ns.Lookup(control->inode, "other").has_value());

  auto status_attr = ns.Lookup(control->inode, "status.json");
  ASSERT_TRUE(status_attr.has_value());
  EXPECT_TRUE(status_attr->is_control);
  EXPECT_FALSE(status_attr->is_dir);
  std::optional<std::string> text = ns.ControlContent(status_attr->inode);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(status_attr->size, text->size());
  json status = json::parse(*text);
  EXPECT_EQ(status["mountpoint"], "/mnt/models");
  EXPECT_EQ(status["pid"], static_cast<int64_t>(::getpid()));
  EXPECT_FALSE(ns.ControlContent(Namespace::kRootInode).has_value());
  EXPECT_TRUE(ns.GetAttr(Namespace::kMetricsInode)->is_control);
}

TEST_F(StatusSnapshotTest, ModelsGoFromUnbuiltToReadyOrErrorAndCountersSurviveRebuilds) {
  Catalog catalog(Options());
  Namespace ns(catalog);
  const std::string good = "dir:" + (dir_ / "good");
  const std::string bad = "dir:" + (dir_ / "bad");

  json status = json::parse(*ns.ControlContent(Namespace::kStatusJsonInode));
  EXPECT_EQ(Model(status, good)["state"], "not-yet-looked-up");
  EXPECT_EQ(Model(status, bad)["state"], "not-yet-looked-up");
  EXPECT_TRUE(Model(status, good)["names"] == json::array({"good.apr"}));

  auto file = ns.Lookup(Namespace::kRootInode, "good.apr");
  ASSERT_TRUE(file.has_value());
  EXPECT_FALSE(ns.Lookup(Namespace::kRootInode, "bad.apr").has_value());
  status = json::parse(*ns.ControlContent(Namespace::kStatusJsonInode));
  EXPECT_EQ(Model(status, good)["state"], "ready");
  EXPECT_EQ(Model(status, good)["size"], file->size);
  EXPECT_EQ(Model(status, bad)["state"], "error");
  EXPECT_NE(Model(status, bad)["error"].get<std::string>().find("model.safetensors"),
            std::string::npos);

  // What the FUSE layer counts lands in the model's counters, kept when the model is rebuilt.
  std::optional<Namespace::OpenedFile> opened = ns.OpenView(file->inode);
  ASSERT_TRUE(opened.has_value());
  opened->file->counters().bytes_read += 1234;
  opened->file->counters().errors += 2;
  fs::last_write_time(dir_ / "good/config.json",
                      fs::last_write_time(dir_ / "good/config.json") + std::chrono::seconds(5));
  auto rebuilt = ns.Lookup(Namespace::kRootInode, "good.apr");
  ASSERT_TRUE(rebuilt.has_value());
  EXPECT_NE(rebuilt->inode, file->inode) << "a changed model gets a new inode";
  status = json::parse(*ns.ControlContent(Namespace::kStatusJsonInode));
  EXPECT_EQ(Model(status, good)["bytes_read"], 1234);
  EXPECT_EQ(Model(status, good)["errors"], 2);

  auto xattrs = ns.Xattrs(rebuilt->inode);
  ASSERT_TRUE(xattrs.has_value());
  std::map<std::string, std::string> attrs(xattrs->begin(), xattrs->end());
  EXPECT_EQ(attrs["user.aprfs.key"], good);
  EXPECT_EQ(attrs["user.aprfs.bytes_read"], "1234");
  EXPECT_EQ(attrs["user.aprfs.shards"], "2");
  EXPECT_EQ(attrs.count("user.aprfs.revision"), 0u);
  EXPECT_EQ(ns.Xattrs(Namespace::kRootInode)->size(), 0u);
  EXPECT_FALSE(ns.Xattrs(987654321).has_value());

  aprfs_itest::PromParse metrics =
      aprfs_itest::ParsePrometheusText(*ns.ControlContent(Namespace::kMetricsInode));
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems);
  EXPECT_EQ(metrics.Value("aprfs_read_errors_total", {{"model", "good.apr"}}), 2);
  // A rejected model keeps the name it claims (shown nowhere, but people know it by it).
  EXPECT_EQ(metrics.Value("aprfs_model_ready", {{"model", "bad.apr"}}), 0);
}

TEST(StatusRenderTest, MetricLabelsAreEscaped) {
  MountStatus status;
  status.version = "1";
  ModelStatus model;
  model.key = "dir:/odd \"name\"\\x\ny";
  model.kind = "local";
  model.source = "file:///odd";
  model.state = "error";
  status.models.push_back(model);
  aprfs_itest::PromParse metrics = aprfs_itest::ParsePrometheusText(RenderMetrics(status));
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems);
  EXPECT_EQ(metrics.Value("aprfs_model_ready", {{"model", model.key}}), 0);
  json parsed = json::parse(RenderStatusJson(status));
  EXPECT_EQ(parsed["models"][0]["key"], model.key);
  EXPECT_TRUE(parsed["models"][0]["name"].is_null());
}

TEST(StatusRenderTest, S3SourcesSayWhenTheyWereListedAndWhyTheLastListingFailed) {
  MountStatus status;
  status.version = "1";
  S3SourceStatus fine;
  fine.uri = "s3://models/team";
  fine.models = 3;
  fine.listed_at_ns = 1764000000'000'000'000;
  S3SourceStatus failing = fine;
  failing.uri = "s3://other/";
  failing.refreshing = true;
  failing.error = "s3://other/: list: no answer from http://127.0.0.1:1 (timed out)";
  S3SourceStatus never;
  never.uri = "s3://never/";
  never.error = "s3://never/: no such bucket";
  status.s3_sources = {fine, failing, never};
  json parsed = json::parse(RenderStatusJson(status));
  ASSERT_EQ(parsed["s3_sources"].size(), 3u);
  EXPECT_EQ(parsed["s3_sources"][0]["uri"], fine.uri);
  EXPECT_EQ(parsed["s3_sources"][0]["models"], 3);
  EXPECT_EQ(parsed["s3_sources"][0]["listed_at"], "2025-11-24T16:00:00.000Z");
  EXPECT_EQ(parsed["s3_sources"][0]["refreshing"], false);
  EXPECT_TRUE(parsed["s3_sources"][0]["error"].is_null());
  EXPECT_EQ(parsed["s3_sources"][1]["refreshing"], true);
  EXPECT_EQ(parsed["s3_sources"][1]["error"], *failing.error);
  EXPECT_TRUE(parsed["s3_sources"][2]["listed_at"].is_null());
  aprfs_itest::PromParse metrics = aprfs_itest::ParsePrometheusText(RenderMetrics(status));
  EXPECT_TRUE(metrics.problems.empty()) << ::testing::PrintToString(metrics.problems);
  EXPECT_EQ(metrics.Value("aprfs_s3_listed_time_seconds", {{"source", fine.uri}}), 1764000000);
  EXPECT_EQ(metrics.Value("aprfs_s3_listing_failed", {{"source", fine.uri}}), 0);
  EXPECT_EQ(metrics.Value("aprfs_s3_listing_failed", {{"source", failing.uri}}), 1);
  EXPECT_EQ(metrics.Value("aprfs_s3_listing_failed", {{"source", never.uri}}), 1);
  // Nothing without S3 sources.
  EXPECT_FALSE(json::parse(RenderStatusJson(MountStatus{})).contains("s3_sources"));
}

}  // namespace
}  // namespace aprfs
