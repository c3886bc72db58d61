// ImportShardSet on model folders written by tests/support, read back with ReadAprFile from a
// materialized copy of the plan: the index, the bytes, the layout and the metadata must be what
// aprender's importer would write (apr-v2-format.md §4, §5, §11; notes/aprender-import.md).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "fetch/local_model.h"
#include "format/apr/apr_reader.h"
#include "format/error.h"
#include "format/views/model_import.h"
#include "tests/support/materialize.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using nlohmann::json;
using testing::LlamaLikeModel;
using testing::MakeTensor;
using testing::TempDir;
using testing::TestModel;
using testing::TestTensor;
using testing::WriteFile;
using testing::WriteModel;

constexpr uint64_t Align64(uint64_t x) { return (x + 63) / 64 * 64; }

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ReadAt ReadAtString(const std::string& bytes) {
  return [&bytes](uint64_t offset, uint64_t length) -> std::string {
    if (offset >= bytes.size()) return {};
    return bytes.substr(offset, length);
  };
}

struct Imported {
  LoadedModel loaded;
  ImportedModel imported;
  std::string file;
  AprFile apr;
  std::string metadata_text;

  const AprIndexEntry* Entry(const std::string& name) const {
    for (const auto& e : apr.index) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }
  std::string Bytes(const AprIndexEntry& e) const {
    return file.substr(apr.header.data_offset + e.offset, e.size);
  }
};

Imported ImportFolder(const std::string& dir, const std::string& name = "test-model",
                      const std::optional<std::string>& source = "file:///models/test-model") {
  Imported r;
  r.loaded = LoadLocalModel(dir, name, source);
  r.imported = ImportShardSet(r.loaded.set);
  std::vector<std::string> bytes;
  for (const Shard& shard : r.loaded.set.shards) bytes.push_back(ReadFileBytes(dir + "/" + shard.file));
  r.file = testing::MaterializePlan(r.imported.plan, bytes);
  r.apr = ReadAprFile(ReadAtString(r.file), r.file.size());
  r.metadata_text = r.file.substr(r.apr.header.metadata_offset, r.apr.header.metadata_size);
  return r;
}

uint8_t ExpectedCode(const std::string& dtype) {
  static const std::map<std::string, uint8_t> codes = {
      {"F32", 0}, {"F16", 1}, {"BF16", 30}, {"F64", 3}, {"I32", 4},
      {"I64", 5}, {"I8", 6},  {"U8", 7},    {"BOOL", 7}};
  return codes.at(dtype);
}

uint64_t Elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Non-empty tensors in the order their bytes should appear: shards by byte-wise file name,
// then each shard's own data order.
std::vector<std::string> ExpectedDataOrder(const TestModel& model) {
  std::vector<std::string> names = model.ShardNames();
  std::vector<size_t> shards(model.shards.size());
  std::iota(shards.begin(), shards.end(), 0);
  std::sort(shards.begin(), shards.end(), [&](size_t a, size_t b) { return names[a] < names[b]; });
  std::vector<std::string> order;
  for (size_t s : shards) {
    std::vector<size_t> in_shard = model.shard_layout.data_order;
    if (in_shard.empty()) {
      in_shard.resize(model.shards[s].size());
      std::iota(in_shard.begin(), in_shard.end(), 0);
    }
    for (size_t i : in_shard) {
      if (!model.shards[s][i].bytes.empty()) order.push_back(model.shards[s][i].name);
    }
  }
  return order;
}

const char* const kAliasKeys[] = {
    "hidden_dim", "d_model", "n_embd", "n_layers", "num_hidden_layers", "n_layer", "n_heads",
    "num_attention_heads", "n_head", "n_kv_heads", "num_key_value_heads", "n_vocab", "ffn_dim",
    "intermediate_dim", "n_inner", "max_seq_len", "context_length", "n_ctx", "layer_norm_eps",
    "norm_eps"};

// Everything that holds for any import; `tied` says whether lm_head.weight was synthesized.
void CheckImport(const TestModel& model, const Imported& r, bool tied,
                 const std::string& embedding = "model.embed_tokens.weight") {
  const AprFile& apr = r.apr;
  std::map<std::string, const TestTensor*> tensors = model.TensorsByName();
  size_t expected_count = tensors.size() + (tied ? 1 : 0);
  ASSERT_EQ(apr.index.size(), expected_count);
  EXPECT_EQ(apr.header.tensor_count, expected_count);
  EXPECT_EQ(r.imported.plan.tensor_count, expected_count);
  EXPECT_EQ(r.imported.tied_lm_head, tied);
  EXPECT_EQ(apr.header.flags, 0x0400);
  EXPECT_EQ(apr.header.version_major, 2);
  EXPECT_EQ(apr.header.version_minor, 0);
  EXPECT_EQ(apr.header.metadata_offset, 64u);
  EXPECT_EQ(apr.header.data_offset % 64, 0u);
  EXPECT_TRUE(apr.HasFooter());
  EXPECT_EQ(apr.RequiredLength() + 4, r.file.size());

  // Index sorted byte-wise, names unique.
  for (size_t i = 1; i < apr.index.size(); ++i) {
    EXPECT_LT(apr.index[i - 1].name, apr.index[i].name) << "index not sorted at " << i;
  }
  // Every tensor: aligned, right dtype/shape/size, bytes equal to the source.
  uint64_t params = 0;
  for (const AprIndexEntry& e : apr.index) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(e.offset % 64, 0u);
    const TestTensor* source = nullptr;
    if (tied && e.name == "lm_head.weight") {
      source = tensors.at(embedding);
    } else {
      ASSERT_TRUE(tensors.count(e.name)) << "unexpected tensor in the index";
      source = tensors.at(e.name);
    }
    EXPECT_EQ(e.dtype, ExpectedCode(source->dtype));
    EXPECT_EQ(e.shape, source->shape);
    EXPECT_EQ(e.size, source->bytes.size());
    EXPECT_TRUE(r.Bytes(e) == source->bytes) << "payload differs from the source bytes";
    params += Elements(source->shape);
  }
  EXPECT_EQ(r.imported.param_count, params);

  // Data region: the stored (non-alias) tensors tile it in shard order, 64-byte steps.
  std::vector<const AprIndexEntry*> stored;
  for (const AprIndexEntry& e : apr.index) {
    if (!(tied && e.name == "lm_head.weight")) stored.push_back(&e);
  }
  std::stable_sort(stored.begin(), stored.end(), [](const AprIndexEntry* a, const AprIndexEntry* b) {
    return std::tie(a->offset, a->size) < std::tie(b->offset, b->size);
  });
  uint64_t cursor = 0;
  std::vector<std::string> order;
  for (const AprIndexEntry* e : stored) {
    EXPECT_EQ(e->offset, cursor) << e->name << ": data is not laid out back to back";
    cursor += Align64(e->size);
    if (e->size > 0) order.push_back(e->name);
  }
  EXPECT_EQ(order, ExpectedDataOrder(model));
  EXPECT_EQ(r.imported.plan.footer_offset, apr.header.data_offset + cursor);
  if (tied) {
    const AprIndexEntry* head = r.Entry("lm_head.weight");
    const AprIndexEntry* embed = r.Entry(embedding);
    ASSERT_NE(head, nullptr);
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(head->offset, embed->offset);
    EXPECT_EQ(head->size, embed->size);
    EXPECT_EQ(head->dtype, embed->dtype);
    EXPECT_EQ(head->shape, embed->shape);
  }
  // Zero padding between payloads.
  for (const AprIndexEntry* e : stored) {
    uint64_t from = apr.header.data_offset + e->offset + e->size;
    uint64_t to = apr.header.data_offset + e->offset + Align64(e->size);
    EXPECT_EQ(r.file.substr(from, to - from), std::string(to - from, '\0')) << e->name;
  }

  EXPECT_EQ(LintAprFile(apr, ReadAtString(r.file)), std::vector<std::string>{});

  // Metadata every import carries.
  const json& m = apr.metadata;
  EXPECT_EQ(m.value("original_format", ""), "safetensors");
  EXPECT_EQ(m.at("param_count").get<uint64_t>(), params);
  EXPECT_EQ(m.at("total_size").get<uint64_t>(), 0u);
  EXPECT_TRUE(m.at("license").is_null());
  EXPECT_TRUE(m.at("data_source").is_null());
  EXPECT_TRUE(m.at("data_license").is_null());
  ASSERT_TRUE(m.contains("tensor_shapes"));
  const json& shapes = m.at("tensor_shapes");
  EXPECT_EQ(shapes.size(), expected_count);
  for (const AprIndexEntry& e : apr.index) {
    ASSERT_TRUE(shapes.contains(e.name)) << e.name;
    EXPECT_EQ(shapes.at(e.name).get<std::vector<uint64_t>>(), e.shape) << e.name;
  }
  if (tied) {
    EXPECT_EQ(m.at("tied_embeddings"), json(true));
  } else {
    EXPECT_FALSE(m.contains("tied_embeddings"));
  }
  for (const char* alias : kAliasKeys) EXPECT_FALSE(m.contains(alias)) << alias;
  EXPECT_EQ(r.metadata_text.rfind("{\"model_type\":", 0), 0u) << r.metadata_text.substr(0, 80);
}

// A model built from explicit shards, with no config or tokenizer unless given.
TestModel ModelOf(std::vector<std::vector<TestTensor>> shards,
                  TestModel::Layout layout = TestModel::Layout::Index) {
  TestModel model;
  model.shards = std::move(shards);
  model.layout = layout;
  return model;
}

class ModelImport : public ::testing::Test {
 protected:
  Imported WriteAndImport(const TestModel& model) {
    WriteModel(dir_.path(), model);
    return ImportFolder(dir_.path());
  }
  std::string ImportError(const TestModel& model) {
    WriteModel(dir_.path(), model);
    try {
      LoadedModel loaded = LoadLocalModel(dir_.path(), "broken-model", std::nullopt);
      ImportShardSet(loaded.set);
    } catch (const FormatError& e) {
      return e.what();
    }
    ADD_FAILURE() << "import succeeded";
    return "";
  }
  TempDir dir_;
};

// ---------------------------------------------------------------------------------------------
// Shard counts and folder layouts.

TEST_F(ModelImport, OneShard) {
  TestModel model = LlamaLikeModel(2, 1);
  Imported r = WriteAndImport(model);
  ASSERT_EQ(r.loaded.set.shards.size(), 1u);
  CheckImport(model, r, false);
}

TEST_F(ModelImport, TwoShards) {
  TestModel model = LlamaLikeModel(3, 2);
  Imported r = WriteAndImport(model);
  ASSERT_EQ(r.loaded.set.shards.size(), 2u);
  CheckImport(model, r, false);
}

TEST_F(ModelImport, SevenShards) {
  TestModel model = LlamaLikeModel(4, 7);
  Imported r = WriteAndImport(model);
  ASSERT_EQ(r.loaded.set.shards.size(), 7u);
  CheckImport(model, r, false);
}

TEST_F(ModelImport, HundredShards) {
  TestModel model = LlamaLikeModel(20, 100);
  Imported r = WriteAndImport(model);
  ASSERT_EQ(r.loaded.set.shards.size(), 100u);
  CheckImport(model, r, false);
  // Source k of the plan is shard k in byte-wise file-name order.
  for (size_t k = 1; k < r.loaded.set.shards.size(); ++k) {
    EXPECT_LT(r.loaded.set.shards[k - 1].file, r.loaded.set.shards[k].file);
  }
  for (size_t i = 1; i < r.imported.plan.extents.size(); ++i) {
    EXPECT_LE(r.imported.plan.extents[i - 1].source, r.imported.plan.extents[i].source);
  }
}

TEST_F(ModelImport, SingleModelSafetensors) {
  TestModel model = LlamaLikeModel(2, 1);
  model.layout = TestModel::Layout::Single;
  Imported r = WriteAndImport(model);
  ASSERT_FALSE(r.loaded.set.index.has_value());
  ASSERT_EQ(r.loaded.set.shards.size(), 1u);
  EXPECT_EQ(r.loaded.set.shards[0].file, "model.safetensors");
  CheckImport(model, r, false);
}

TEST_F(ModelImport, NoIndexSeveralSafetensors) {
  TestModel model = LlamaLikeModel(3, 3);
  model.layout = TestModel::Layout::NoIndex;
  Imported r = WriteAndImport(model);
  ASSERT_FALSE(r.loaded.set.index.has_value());
  ASSERT_EQ(r.loaded.set.shards.size(), 3u);
  CheckImport(model, r, false);
}

TEST_F(ModelImport, ModelSafetensorsWinsOverOtherFilesWithoutIndex) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {2})}}, TestModel::Layout::Single);
  WriteModel(dir_.path(), model);
  WriteFile(dir_ / "other.safetensors",
            testing::SafetensorsBytes({MakeTensor("stray", "F32", {1})}));
  Imported r = ImportFolder(dir_.path());
  ASSERT_EQ(r.loaded.set.shards.size(), 1u);
  EXPECT_EQ(r.loaded.set.shards[0].file, "model.safetensors");
  CheckImport(model, r, false);
}

TEST_F(ModelImport, IndexWinsOverModelSafetensors) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {2})}, {MakeTensor("b", "U8", {3})}});
  WriteModel(dir_.path(), model);
  WriteFile(dir_ / "model.safetensors",
            testing::SafetensorsBytes({MakeTensor("stale", "F32", {1})}));
  Imported r = ImportFolder(dir_.path());
  ASSERT_TRUE(r.loaded.set.index.has_value());
  ASSERT_EQ(r.loaded.set.shards.size(), 2u);
  CheckImport(model, r, false);
}

TEST_F(ModelImport, DataOrderDiffersFromNameOrderWithUnalignedHeaders) {
  std::vector<std::vector<TestTensor>> shards(2);
  for (int s = 0; s < 2; ++s) {
    std::string p = "s" + std::to_string(s) + ".";
    shards[s] = {MakeTensor(p + "a", "F32", {3, 5}), MakeTensor(p + "b", "BF16", {7}),
                 MakeTensor(p + "c", "U8", {13}), MakeTensor(p + "d", "F16", {2, 33})};
  }
  TestModel model = ModelOf(shards);
  model.shard_layout.pad_header_to_8 = false;
  model.shard_layout.data_order = {2, 0, 3, 1};  // c, a, d, b
  Imported r = WriteAndImport(model);
  for (const Shard& shard : r.loaded.set.shards) {
    EXPECT_NE(shard.header.data_start() % 8, 0u) << shard.file << " should be unaligned";
  }
  CheckImport(model, r, false);
  EXPECT_EQ(ExpectedDataOrder(model),
            (std::vector<std::string>{"s0.c", "s0.a", "s0.d", "s0.b", "s1.c", "s1.a", "s1.d",
                                      "s1.b"}));
}

TEST_F(ModelImport, EmptyAndScalarTensors) {
  std::vector<std::vector<TestTensor>> shards = {
      {MakeTensor("e.first", "F32", {0}), MakeTensor("w.one", "F32", {3}),
       MakeTensor("scalar.f32", "F32", {}), MakeTensor("e.mid", "BF16", {4, 0}),
       MakeTensor("e.mid2", "U8", {0, 9}), MakeTensor("w.two", "I8", {5})},
      {MakeTensor("scalar.i64", "I64", {}), MakeTensor("e.last", "F16", {0})},
  };
  TestModel model = ModelOf(shards);
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
  const AprIndexEntry* scalar = r.Entry("scalar.f32");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->size, 4u);
  const AprIndexEntry* empty = r.Entry("e.mid");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->size, 0u);
  EXPECT_EQ(empty->shape, (std::vector<uint64_t>{4, 0}));
  // No extent for an empty tensor.
  for (const DataExtent& e : r.imported.plan.extents) EXPECT_GT(e.length, 0u);
  EXPECT_EQ(r.apr.metadata.at("param_count").get<uint64_t>(), 3u + 1 + 5 + 1);
}

TEST_F(ModelImport, OnlyEmptyTensors) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {0}), MakeTensor("b", "F32", {2, 0})}});
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
  EXPECT_TRUE(r.imported.plan.extents.empty());
  EXPECT_EQ(r.imported.plan.footer_offset, r.imported.plan.data_offset);
  EXPECT_EQ(r.file.size(), r.imported.plan.data_offset + 4);
}

TEST_F(ModelImport, AllMappedDtypes) {
  std::vector<TestTensor> tensors;
  for (const char* dtype : {"F32", "F16", "BF16", "F64", "I32", "I64", "I8", "U8", "BOOL"}) {
    tensors.push_back(MakeTensor(std::string("t.") + dtype, dtype, {3, 5}));
  }
  TestModel model = ModelOf({tensors});
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
  EXPECT_EQ(r.Entry("t.F32")->dtype, 0);
  EXPECT_EQ(r.Entry("t.F16")->dtype, 1);
  EXPECT_EQ(r.Entry("t.BF16")->dtype, 30);
  EXPECT_EQ(r.Entry("t.F64")->dtype, 3);
  EXPECT_EQ(r.Entry("t.I32")->dtype, 4);
  EXPECT_EQ(r.Entry("t.I64")->dtype, 5);
  EXPECT_EQ(r.Entry("t.I8")->dtype, 6);
  EXPECT_EQ(r.Entry("t.U8")->dtype, 7);
  EXPECT_EQ(r.Entry("t.BOOL")->dtype, 7);
}

// ---------------------------------------------------------------------------------------------
// Rejections.

class RejectedDtype : public ::testing::TestWithParam<const char*> {};

TEST_P(RejectedDtype, NamesModelShardTensorAndDtype) {
  const std::string dtype = GetParam();
  TempDir dir;
  TestModel model = ModelOf({{MakeTensor("ok.weight", "F32", {2})},
                             {MakeTensor("bad.tensor", dtype, {4, 2}), MakeTensor("z", "F32", {1})}});
  WriteModel(dir.path(), model);
  LoadedModel loaded = LoadLocalModel(dir.path(), "dtype-model", std::nullopt);
  try {
    ImportShardSet(loaded.set);
    ADD_FAILURE() << dtype << " accepted";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("bad.tensor"), std::string::npos) << message;
    EXPECT_NE(message.find(dtype), std::string::npos) << message;
    EXPECT_NE(message.find("dtype-model"), std::string::npos) << message;
    EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(ModelImport, RejectedDtype,
                         ::testing::Values("F8_E4M3", "F8_E5M2", "U16", "I16", "U32", "U64",
                                           "C64"));

TEST_F(ModelImport, TensorInTwoShards) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {2}), MakeTensor("dup.weight", "F32", {2})},
                             {MakeTensor("dup.weight", "F32", {2}), MakeTensor("b", "F32", {1})}},
                            TestModel::Layout::NoIndex);
  std::string message = ImportError(model);
  EXPECT_NE(message.find("dup.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("model-00001-of-00002.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("broken-model"), std::string::npos) << message;
}

TEST_F(ModelImport, TensorInTwoShardsWithIndex) {
  // The writer's index repeats the key "dup.weight" (the last, shard 2, wins); "a" makes the
  // index name shard 1 too, so both shards are read and both hold "dup.weight".
  TestModel model = ModelOf({{MakeTensor("a", "F32", {1}), MakeTensor("dup.weight", "F32", {2})},
                             {MakeTensor("dup.weight", "F16", {2}), MakeTensor("b", "F32", {1})}});
  std::string message = ImportError(model);
  EXPECT_NE(message.find("dup.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("model-00001-of-00002.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
}

TEST_F(ModelImport, IndexNamesTensorAbsentFromItsShard) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {2})}, {MakeTensor("b", "F32", {2})}});
  WriteModel(dir_.path(), model);
  WriteFile(dir_ / "model.safetensors.index.json",
            "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
            "\"b\":\"model-00002-of-00002.safetensors\","
            "\"ghost.weight\":\"model-00001-of-00002.safetensors\"}}");
  LoadedModel loaded = LoadLocalModel(dir_.path(), "ghost-model", std::nullopt);
  try {
    ImportShardSet(loaded.set);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("ghost.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("model-00001-of-00002.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find("ghost-model"), std::string::npos) << message;
  }
}

TEST_F(ModelImport, IndexMapsTensorToTheWrongShard) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {2})}, {MakeTensor("b", "F32", {2})}});
  WriteModel(dir_.path(), model);
  // Swapped: "a" lives in shard 1 and "b" in shard 2.
  WriteFile(dir_ / "model.safetensors.index.json",
            "{\"weight_map\":{\"a\":\"model-00002-of-00002.safetensors\","
            "\"b\":\"model-00001-of-00002.safetensors\"}}");
  LoadedModel loaded = LoadLocalModel(dir_.path(), "swapped-model", std::nullopt);
  try {
    ImportShardSet(loaded.set);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("'a'"), std::string::npos) << message;
    EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find("it is in 'model-00001-of-00002.safetensors'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("swapped-model"), std::string::npos) << message;
  }
}

TEST_F(ModelImport, IndexNamesMissingShardFile) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {2})}, {MakeTensor("b", "F32", {2})}});
  WriteModel(dir_.path(), model);
  WriteFile(dir_ / "model.safetensors.index.json",
            "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
            "\"b\":\"model-00002-of-00002.safetensors\","
            "\"c\":\"model-00003-of-00003.safetensors\"}}");
  try {
    LoadedModel loaded = LoadLocalModel(dir_.path(), "m", std::nullopt);
    ImportShardSet(loaded.set);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("model-00003-of-00003.safetensors"), std::string::npos) << message;
  }
}

TEST_F(ModelImport, TensorNameOver256BytesIsRejected) {
  std::string long_name(257, 'n');
  TestModel model = ModelOf({{MakeTensor(long_name, "F32", {1})}});
  std::string message = ImportError(model);
  EXPECT_NE(message.find(long_name), std::string::npos) << message;
  EXPECT_NE(message.find("256"), std::string::npos) << message;
}

TEST_F(ModelImport, MoreThanEightDimsIsRejected) {
  TestModel model = ModelOf({{MakeTensor("deep", "F32", {1, 1, 1, 1, 1, 1, 1, 1, 2})}});
  std::string message = ImportError(model);
  EXPECT_NE(message.find("deep"), std::string::npos) << message;
  EXPECT_NE(message.find("8"), std::string::npos) << message;
}

TEST_F(ModelImport, NameOf256BytesAndEightDimsAreAccepted) {
  TestModel model = ModelOf({{MakeTensor(std::string(256, 'n'), "F32", {1, 1, 1, 1, 1, 1, 1, 2}),
                              MakeTensor("x", "U8", {3})}});
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
}

// ---------------------------------------------------------------------------------------------
// Tied embeddings.

TEST_F(ModelImport, TiedLmHeadBecomesAliasOfEmbedding) {
  TestModel model = LlamaLikeModel(2, 2, /*with_lm_head=*/false);
  ASSERT_NE(model.config_json.find("\"tie_word_embeddings\":true"), std::string::npos);
  Imported r = WriteAndImport(model);
  CheckImport(model, r, true);
  // No bytes were added for the head: the data region holds exactly the stored tensors.
  uint64_t stored = 0;
  for (const auto& [name, t] : model.TensorsByName()) stored += Align64(t->bytes.size());
  EXPECT_EQ(r.imported.plan.footer_offset - r.imported.plan.data_offset, stored);
  uint64_t extent_bytes = 0;
  for (const DataExtent& e : r.imported.plan.extents) extent_bytes += e.length;
  uint64_t raw = 0;
  for (const auto& [name, t] : model.TensorsByName()) raw += t->bytes.size();
  EXPECT_EQ(extent_bytes, raw);
  EXPECT_EQ(r.apr.metadata.at("tensor_shapes").at("lm_head.weight"), json({96, 64}));
}

TEST_F(ModelImport, TiedLmHeadWhenConfigIsAbsent) {
  TestModel model = LlamaLikeModel(1, 2, false);
  model.config_json.clear();
  Imported r = WriteAndImport(model);
  ASSERT_FALSE(r.loaded.set.config.has_value());
  CheckImport(model, r, true);
  EXPECT_EQ(r.apr.metadata.at("model_type"), "Auto");
}

TEST_F(ModelImport, TiedLmHeadWhenConfigOmitsTieKey) {
  TestModel model = LlamaLikeModel(1, 1, false);
  model.config_json = "{\"model_type\":\"llama\",\"hidden_size\":64}";
  Imported r = WriteAndImport(model);
  CheckImport(model, r, true);
}

TEST_F(ModelImport, TieWordEmbeddingsFalseAddsNoLmHead) {
  TestModel model = LlamaLikeModel(2, 2, false);
  size_t at = model.config_json.find("\"tie_word_embeddings\":true");
  ASSERT_NE(at, std::string::npos);
  model.config_json.replace(at, 26, "\"tie_word_embeddings\":false");
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
  EXPECT_EQ(r.Entry("lm_head.weight"), nullptr);
}

TEST_F(ModelImport, ExistingLmHeadOrOutputWeightIsNotReplaced) {
  TestModel with_head = LlamaLikeModel(1, 2, true);
  Imported r = WriteAndImport(with_head);
  CheckImport(with_head, r, false);
  EXPECT_NE(r.Bytes(*r.Entry("lm_head.weight")), r.Bytes(*r.Entry("model.embed_tokens.weight")));

  TempDir other;
  TestModel gguf_names = ModelOf({{MakeTensor("token_embd.weight", "F32", {8, 4}),
                                   MakeTensor("output.weight", "F32", {8, 4})}});
  WriteModel(other.path(), gguf_names);
  Imported g = ImportFolder(other.path());
  CheckImport(gguf_names, g, false);
  EXPECT_EQ(g.Entry("lm_head.weight"), nullptr);
}

TEST_F(ModelImport, NoEmbeddingMeansNoLmHead) {
  TestModel model = ModelOf({{MakeTensor("encoder.weight", "F32", {4, 4})}});
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
}

TEST_F(ModelImport, OtherEmbeddingNamesAreTied) {
  for (const char* name : {"token_embd.weight", "wte.weight",
                           "model.language_model.embed_tokens.weight"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    TestModel model = ModelOf({{MakeTensor(name, "F16", {6, 4}), MakeTensor("norm", "F32", {4})}});
    WriteModel(dir.path(), model);
    Imported r = ImportFolder(dir.path());
    CheckImport(model, r, true, name);
  }
}

// ---------------------------------------------------------------------------------------------
// Metadata.

TEST_F(ModelImport, LlamaMetadataKeys) {
  TestModel model = LlamaLikeModel(2, 2);
  model.shard_layout.metadata = {{"format", "pt"}, {"producer", "unit \"test\""}};
  WriteModel(dir_.path(), model);
  Imported r = ImportFolder(dir_.path(), "Llama-Tiny", "hf://org/Llama-Tiny");
  CheckImport(model, r, false);
  const json& m = r.apr.metadata;
  EXPECT_EQ(m.at("model_type"), "Llama");
  EXPECT_EQ(m.at("name"), "Llama-Tiny");
  EXPECT_EQ(m.at("source"), "hf://org/Llama-Tiny");
  EXPECT_EQ(m.at("architecture"), "llama");
  EXPECT_EQ(m.at("hf_model_type"), "llama");
  EXPECT_EQ(m.at("hf_architecture"), "LlamaForCausalLM");
  EXPECT_EQ(m.at("hidden_size"), 64);
  EXPECT_EQ(m.at("num_layers"), 2);
  EXPECT_EQ(m.at("num_heads"), 4);
  EXPECT_EQ(m.at("num_kv_heads"), 2);
  EXPECT_EQ(m.at("vocab_size"), 96);
  EXPECT_EQ(m.at("intermediate_size"), 128);
  EXPECT_EQ(m.at("max_position_embeddings"), 256);
  EXPECT_EQ(m.at("rope_type"), 0);
  EXPECT_FLOAT_EQ(m.at("rope_theta").get<float>(), 500000.0f);
  EXPECT_FLOAT_EQ(m.at("rms_norm_eps").get<float>(), 1e-5f);
  EXPECT_NE(r.metadata_text.find("\"rope_theta\":500000.0,"), std::string::npos);
  EXPECT_NE(r.metadata_text.find("\"rms_norm_eps\":0.00001"), std::string::npos);
  for (const char* integer : {"hidden_size", "num_layers", "num_heads", "num_kv_heads",
                              "vocab_size", "intermediate_size", "max_position_embeddings",
                              "param_count", "total_size", "rope_type"}) {
    EXPECT_TRUE(m.at(integer).is_number_unsigned()) << integer;
  }
  EXPECT_EQ(m.at("source_metadata"),
            json({{"format", "pt"}, {"producer", "unit \"test\""}}));
  // The typed keys in AprV2Metadata's order (§4.2).
  std::vector<std::string> order = {
      "\"model_type\"", "\"name\"", "\"license\"", "\"data_source\"", "\"data_license\"",
      "\"source\"", "\"original_format\"", "\"total_size\"", "\"param_count\"",
      "\"architecture\"", "\"hf_architecture\"", "\"hf_model_type\"", "\"hidden_size\"",
      "\"num_layers\"", "\"num_heads\"", "\"num_kv_heads\"", "\"vocab_size\"",
      "\"intermediate_size\"", "\"max_position_embeddings\"", "\"rope_theta\"", "\"rope_type\"",
      "\"rms_norm_eps\""};
  size_t last = 0;
  for (const std::string& key : order) {
    size_t at = r.metadata_text.find(key + ":");
    ASSERT_NE(at, std::string::npos) << key;
    EXPECT_GE(at, last) << key << " out of order";
    last = at;
  }
  // Embedded tokenizer.
  ASSERT_TRUE(m.contains("tokenizer.vocabulary"));
  EXPECT_EQ(m.at("tokenizer.vocabulary").size(), 96u);
  EXPECT_EQ(m.at("tokenizer.vocabulary")[0], "tok0");
  EXPECT_EQ(m.at("tokenizer.vocabulary")[92], "<s>");
  EXPECT_EQ(m.at("tokenizer.vocabulary")[95], "<unk>");
  EXPECT_EQ(m.at("tokenizer.vocab_size"), 96);
  EXPECT_EQ(m.at("tokenizer.merges"), json({"t o", "to k"}));
  EXPECT_EQ(m.at("tokenizer.bos_token_id"), 1);
  EXPECT_EQ(m.at("tokenizer.eos_token_id"), 2);
  EXPECT_EQ(m.at("tokenizer.model_type"), "BPE");
}

struct TypeCase {
  std::string config_model_type;  // empty: key absent
  std::string model_type;
  unsigned rope_type;
};

TEST_F(ModelImport, ModelTypeFromConfigThroughAprenderTable) {
  const TypeCase cases[] = {
      {"llama", "Llama", 0},     {"phi3", "Phi", 2},         {"Phi3", "Phi", 0},
      {"qwen2", "Qwen2", 2},     {"mistral", "Mistral", 0},  {"gpt_neox", "GptNeoX", 2},
      {"qwen3_moe", "Auto", 0},  {"my_new_arch", "Auto", 0}, {"", "Auto", 0},
  };
  for (const TypeCase& c : cases) {
    SCOPED_TRACE(c.config_model_type);
    TempDir dir;
    TestModel model = ModelOf({{MakeTensor("w", "F32", {2, 2})}});
    model.config_json = "{\"architectures\":[\"SomethingForCausalLM\",\"Other\"],\"hidden_size\":8" +
                        (c.config_model_type.empty()
                             ? std::string()
                             : ",\"model_type\":\"" + c.config_model_type + "\"") +
                        "}";
    WriteModel(dir.path(), model);
    Imported r = ImportFolder(dir.path());
    const json& m = r.apr.metadata;
    EXPECT_EQ(m.at("model_type"), c.model_type);
    EXPECT_EQ(m.at("rope_type"), c.rope_type);
    EXPECT_EQ(m.at("hf_architecture"), "SomethingForCausalLM");
    if (c.config_model_type.empty()) {
      EXPECT_FALSE(m.contains("architecture"));
      EXPECT_FALSE(m.contains("hf_model_type"));
    } else {
      EXPECT_EQ(m.at("architecture"), c.config_model_type);  // verbatim, case kept
      EXPECT_EQ(m.at("hf_model_type"), c.config_model_type);
    }
    EXPECT_EQ(m.at("hidden_size"), 8);
    EXPECT_EQ(m.at("intermediate_size"), 32);  // 4 x hidden
    EXPECT_FALSE(m.contains("num_layers"));
    EXPECT_NE(r.metadata_text.find("\"rope_theta\":10000.0"), std::string::npos);
    EXPECT_NE(r.metadata_text.find("\"rms_norm_eps\":0.000001"), std::string::npos);
  }
}

TEST_F(ModelImport, ConfigAliasKeysBecomeCanonicalKeysOnly) {
  TestModel model = ModelOf({{MakeTensor("wte.weight", "F32", {10, 4}),
                              MakeTensor("h.0.attn", "F32", {4, 4})}});
  model.config_json =
      "{\"model_type\":\"gpt2\",\"architectures\":[\"GPT2LMHeadModel\"],\"n_embd\":4,"
      "\"n_layer\":1,\"n_head\":2,\"n_inner\":16,\"n_positions\":32,\"n_ctx\":32,"
      "\"layer_norm_epsilon\":1e-5,\"vocab_size\":10}";
  Imported r = WriteAndImport(model);
  CheckImport(model, r, true, "wte.weight");
  const json& m = r.apr.metadata;
  EXPECT_EQ(m.at("model_type"), "Gpt2");
  EXPECT_EQ(m.at("hidden_size"), 4);
  EXPECT_EQ(m.at("num_layers"), 1);
  EXPECT_EQ(m.at("num_heads"), 2);
  EXPECT_EQ(m.at("num_kv_heads"), 2);
  EXPECT_EQ(m.at("intermediate_size"), 16);
  EXPECT_EQ(m.at("max_position_embeddings"), 32);
  EXPECT_FLOAT_EQ(m.at("rms_norm_eps").get<float>(), 1e-5f);
  EXPECT_EQ(r.imported.param_count, 40u + 16 + 40);
}

TEST_F(ModelImport, NoConfigNoTokenizer) {
  TestModel model = ModelOf({{MakeTensor("w", "F32", {2})}});
  Imported r = WriteAndImport(model);
  const json& m = r.apr.metadata;
  EXPECT_EQ(m.at("model_type"), "Auto");
  for (const char* absent : {"architecture", "hf_architecture", "hf_model_type", "hidden_size",
                             "num_layers", "num_heads", "num_kv_heads", "vocab_size",
                             "intermediate_size", "max_position_embeddings"}) {
    EXPECT_FALSE(m.contains(absent)) << absent;
  }
  for (const auto& [key, value] : m.items()) {
    EXPECT_NE(key.rfind("tokenizer.", 0), 0u) << key;
  }
}

TEST_F(ModelImport, SourceMetadataFirstShardWinsAndAbsentWhenEmpty) {
  TestModel model = ModelOf({{MakeTensor("a", "F32", {1})}, {MakeTensor("b", "F32", {1})}});
  model.shard_layout.metadata.clear();
  Imported r = WriteAndImport(model);
  CheckImport(model, r, false);
  EXPECT_FALSE(r.apr.metadata.contains("source_metadata"));
}

TEST_F(ModelImport, SourceMetadataMergesShardsFirstShardWins) {
  testing::SafetensorsLayout first, second;
  first.metadata = {{"format", "pt"}, {"only.first", "1"}};
  second.metadata = {{"format", "np"}, {"only.second", "2"}};
  WriteFile(dir_ / "model-00001-of-00002.safetensors",
            testing::SafetensorsBytes({MakeTensor("a", "F32", {2})}, first));
  WriteFile(dir_ / "model-00002-of-00002.safetensors",
            testing::SafetensorsBytes({MakeTensor("b", "F32", {2})}, second));
  Imported r = ImportFolder(dir_.path());
  EXPECT_EQ(r.apr.metadata.at("source_metadata"),
            json({{"format", "pt"}, {"only.first", "1"}, {"only.second", "2"}}));
}

TEST_F(ModelImport, DeterministicPlan) {
  TestModel model = LlamaLikeModel(2, 3);
  WriteModel(dir_.path(), model);
  Imported a = ImportFolder(dir_.path());
  Imported b = ImportFolder(dir_.path());
  EXPECT_TRUE(a.file == b.file);
  EXPECT_EQ(a.imported.plan.prefix, b.imported.plan.prefix);
}

}  // namespace
}  // namespace aprfs
