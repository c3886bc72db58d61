// ReadModelFolder: which files of a folder make a model, whatever keeps the folder (a directory,
// a Hub revision, an S3 prefix all go through it).
#include "fetch/model_folder.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "format/error.h"

namespace aprfs {
namespace {

// A folder held in memory: file name -> text.
struct Files {
  std::map<std::string, std::string> texts;
  std::vector<std::string> read;  // in the order asked for

  ModelFolder Folder() {
    ModelFolder folder;
    folder.where = "s3://bucket/models/m";
    for (const auto& [name, text] : texts) folder.files.insert(name);
    folder.read = [this](const std::string& file) {
      read.push_back(file);
      return texts.at(file);
    };
    folder.name_of = [](const std::string& file) { return "s3://bucket/models/m/" + file; };
    return folder;
  }
};

const char* kIndex =
    R"({"metadata":{},"weight_map":{"a":"model-00002-of-00002.safetensors",)"
    R"("b":"model-00001-of-00002.safetensors"}})";

TEST(ModelFolderTest, TheIndexNamesTheShards) {
  Files files{{{"model.safetensors.index.json", kIndex},
               {"model-00001-of-00002.safetensors", ""},
               {"model-00002-of-00002.safetensors", ""},
               {"model.safetensors", ""},  // a leftover: the index wins
               {"extra.safetensors", ""}}};
  std::vector<std::string> shards;
  ShardSet set = ReadModelFolder(files.Folder(), shards);
  ASSERT_TRUE(set.index.has_value());
  EXPECT_EQ(shards, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                              "model-00002-of-00002.safetensors"}));
  EXPECT_FALSE(set.config.has_value());
  EXPECT_TRUE(set.tokenizer.empty());
  EXPECT_EQ(files.read, (std::vector<std::string>{"model.safetensors.index.json"}));
}

TEST(ModelFolderTest, ModelSafetensorsWinsOverOtherShardsWithoutAnIndex) {
  Files files{{{"model.safetensors", ""}, {"a.safetensors", ""}}};
  std::vector<std::string> shards;
  ReadModelFolder(files.Folder(), shards);
  EXPECT_EQ(shards, (std::vector<std::string>{"model.safetensors"}));
}

TEST(ModelFolderTest, OtherwiseEverySafetensorsFileSorted) {
  Files files{{{"z.safetensors", ""}, {"b.safetensors", ""}, {".safetensors", ""},
               {"notes.txt", ""}, {"b.safetensors.bak", ""}}};
  std::vector<std::string> shards = {"stale"};
  ReadModelFolder(files.Folder(), shards);
  EXPECT_EQ(shards, (std::vector<std::string>{"b.safetensors", "z.safetensors"}));
}

TEST(ModelFolderTest, ConfigIsReadBeforeTheTokenizerThatNeedsIt) {
  Files files{{{"model.safetensors", ""},
               {"config.json", R"({"architectures":["LlamaForCausalLM"]})"},
               {"tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]}})"}}};
  std::vector<std::string> shards;
  ShardSet set = ReadModelFolder(files.Folder(), shards);
  EXPECT_TRUE(set.config.has_value());
  EXPECT_FALSE(set.tokenizer.empty());
  EXPECT_EQ(files.read, (std::vector<std::string>{"config.json", "tokenizer.json"}));
}

TEST(ModelFolderTest, NoShardsIsAnErrorNamingTheFolder) {
  Files files{{{"config.json", "{}"}, {"README.md", ""}}};
  std::vector<std::string> shards;
  try {
    ReadModelFolder(files.Folder(), shards);
    ADD_FAILURE() << "accepted a folder without safetensors";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("s3://bucket/models/m: no safetensors files"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelFolderTest, ABadSideFileIsNamedAsTheFolderNamesIt) {
  Files files{{{"model.safetensors", ""}, {"config.json", "{not json"}}};
  std::vector<std::string> shards;
  try {
    ReadModelFolder(files.Folder(), shards);
    ADD_FAILURE() << "accepted a broken config.json";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("s3://bucket/models/m/config.json"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace aprfs
