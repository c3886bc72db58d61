// NAME.safetensors, the shards merged into one file: checked by a reader written here from the
// format's rules (gguf-view.md §6.2) and by our own parser, tensor by tensor against the shards.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fetch/local_model.h"
#include "format/error.h"
#include "format/safetensors/safetensors_header.h"
#include "format/views/merged_safetensors.h"
#include "fs/virtual_file.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using testing::MakeTensor;
using testing::TempDir;
using testing::TestModel;

struct Merged {
  TempDir dir;
  TestModel model;
  LoadedModel loaded;
  std::string bytes;  // the whole merged file, read through a VirtualFile
};

std::unique_ptr<Merged> Merge(TestModel model,
                              const std::function<void(ShardSet&)>& edit = nullptr) {
  auto merged = std::make_unique<Merged>();
  merged->model = std::move(model);
  testing::WriteModel(merged->dir.path(), merged->model);
  merged->loaded = LoadLocalModel(merged->dir.path(), "m", std::nullopt);
  if (edit) edit(merged->loaded.set);
  VirtualFile file("m.safetensors", PlanMergedSafetensors(merged->loaded.set),
                   merged->loaded.sources);
  merged->bytes.resize(file.size());
  EXPECT_EQ(file.Read(0, merged->bytes.size(), merged->bytes.data()),
            static_cast<ssize_t>(merged->bytes.size()));
  return merged;
}

uint64_t LittleEndian64(const std::string& bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(bytes[i]);
  return value;
}

unsigned Bits(const std::string& dtype) {
  static const std::map<std::string, unsigned> kBits = {
      {"BOOL", 8}, {"U8", 8},   {"I8", 8},   {"F16", 16}, {"BF16", 16}, {"I16", 16},
      {"F32", 32}, {"I32", 32}, {"F64", 64}, {"I64", 64}, {"F8_E4M3", 8}};
  return kBits.at(dtype);
}

// The reference reader's rules, independently: N a multiple of 8 (the official writer's
// padding), entries contiguous from 0 in offset order, sizes from shapes and dtypes, the file
// exactly covered. Returns the header, tensors in offset order.
nlohmann::ordered_json ReadLikeTheSpec(const std::string& file) {
  const uint64_t n = LittleEndian64(file);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_LE(8 + n, file.size());
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(file.substr(8, n));
  EXPECT_EQ(header.begin().key(), "__metadata__") << "the metadata comes first";
  uint64_t expected_begin = 0;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    uint64_t elements = 1;
    for (uint64_t d : entry["shape"]) elements *= d;
    const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    EXPECT_EQ(begin, expected_begin) << name << ": no gap, no overlap";
    EXPECT_EQ(end - begin, elements * Bits(entry["dtype"]) / 8) << name;
    expected_begin = end;
  }
  EXPECT_EQ(8 + n + expected_begin, file.size()) << "the data covers the file exactly";
  return header;
}

TestModel MixedModel() {
  TestModel model;
  model.shards = {{MakeTensor("model.embed_tokens.weight", "BF16", {64, 48}),
                   MakeTensor("model.norm.weight", "F32", {48}),
                   MakeTensor("b.counts", "I64", {5})},
                  {MakeTensor("model.layers.0.mlp.up_proj.weight", "BF16", {40, 48}),
                   MakeTensor("a.weight", "F32", {7}), MakeTensor("empty", "F16", {0, 3}),
                   MakeTensor("mask", "BOOL", {3})}};
  return model;
}

TEST(MergedSafetensorsTest, EveryTensorIsItsShardsBytesInTheWritersOrder) {
  auto merged = Merge(MixedModel());
  nlohmann::ordered_json header = ReadLikeTheSpec(merged->bytes);
  EXPECT_EQ(header["__metadata__"], nlohmann::json({{"format", "pt"}}));
  std::vector<std::string> order;
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") order.push_back(name);
  }
  // Element size descending, then name: every tensor starts at a multiple of its element.
  EXPECT_EQ(order, (std::vector<std::string>{"b.counts", "a.weight", "model.norm.weight", "empty",
                                             "model.embed_tokens.weight",
                                             "model.layers.0.mlp.up_proj.weight", "mask"}));
  const uint64_t data = 8 + LittleEndian64(merged->bytes);
  for (const auto& [name, tensor] : merged->model.TensorsByName()) {
    const auto& entry = header[name];
    EXPECT_EQ(entry["dtype"], tensor->dtype) << name;
    EXPECT_EQ(entry["shape"].get<std::vector<uint64_t>>(), tensor->shape) << name;
    const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    EXPECT_EQ(merged->bytes.substr(data + begin, end - begin), tensor->bytes) << name;
    EXPECT_EQ((data + begin) % (Bits(tensor->dtype) / 8), 0u) << name << " is aligned";
  }

  // Our own parser, which applies the official library's rules, accepts it too.
  const SafetensorsHeader parsed = ParseSafetensorsHeader(
      std::string_view(merged->bytes).substr(8, data - 8), merged->bytes.size(), "m.safetensors");
  EXPECT_EQ(parsed.tensors.size(), 7u);
  EXPECT_EQ(parsed.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(MergedSafetensorsTest, KeepsTheShardsMetadataOnlyWhenEveryShardAgrees) {
  TestModel model = MixedModel();
  model.shard_layout.metadata = {{"format", "mlx"}, {"producer", "x"}};
  auto same = Merge(model);
  EXPECT_EQ(ReadLikeTheSpec(same->bytes)["__metadata__"],
            nlohmann::json({{"format", "mlx"}, {"producer", "x"}}));

  auto different = Merge(model, [](ShardSet& set) { set.shards[1].header.metadata["producer"] = "y"; });
  EXPECT_EQ(ReadLikeTheSpec(different->bytes)["__metadata__"], nlohmann::json({{"format", "pt"}}));

  model.shard_layout.metadata = {{"producer", "x"}};  // no format: transformers needs one
  auto without = Merge(model);
  EXPECT_EQ(ReadLikeTheSpec(without->bytes)["__metadata__"],
            nlohmann::json({{"format", "pt"}, {"producer", "x"}}));
}

TEST(MergedSafetensorsTest, NamesNeedingEscapesAndASingleShard) {
  TestModel model;
  model.layout = TestModel::Layout::Single;
  model.shards = {{MakeTensor("quote\"back\\slash", "F16", {2, 2}),
                   MakeTensor("unicode.\xc3\xa9", "F16", {3})}};
  auto merged = Merge(model);
  nlohmann::ordered_json header = ReadLikeTheSpec(merged->bytes);
  EXPECT_TRUE(header.contains("quote\"back\\slash"));
  EXPECT_TRUE(header.contains("unicode.\xc3\xa9"));
}

TEST(MergedSafetensorsTest, AModelWithoutTensorsIsAHeaderOnly) {
  ShardSet set;
  set.name = "none";
  FilePlan plan = PlanMergedSafetensors(set);
  EXPECT_TRUE(plan.extents.empty());
  EXPECT_EQ(plan.total_size, plan.prefix.size());
  EXPECT_FALSE(plan.has_footer());
  ReadLikeTheSpec(plan.prefix);
}

}  // namespace
}  // namespace aprfs
