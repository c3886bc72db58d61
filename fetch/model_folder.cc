#include "fetch/model_folder.h"

#include <string_view>

#include "format/error.h"
#include "format/model/model_config.h"
#include "format/model/tokenizer_embed.h"

namespace aprfs {
namespace {

bool IsSafetensors(std::string_view name) {
  constexpr std::string_view kSuffix = ".safetensors";
  return name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix;
}

}  // namespace

ShardSet ReadModelFolder(const ModelFolder& folder, std::vector<std::string>& shard_files) {
  ShardSet set;
  const std::string index(kWeightIndexFile);
  shard_files.clear();
  if (folder.files.count(index)) {
    set.index = ParseWeightIndex(folder.read(index), folder.name_of(index));
    shard_files = set.index->shard_files;
  } else if (folder.files.count(std::string(kSingleShardFile))) {
    shard_files = {std::string(kSingleShardFile)};
  } else {
    for (const std::string& file : folder.files) {  // a std::set: sorted
      if (IsSafetensors(file)) shard_files.push_back(file);
    }
  }
  if (shard_files.empty()) throw FormatError(folder.where + ": no safetensors files");
  if (folder.files.count("config.json")) {
    set.config = ParseModelConfig(folder.read("config.json"), folder.name_of("config.json"));
  }
  if (folder.files.count("tokenizer.json")) {
    set.tokenizer = ParseTokenizerJson(folder.read("tokenizer.json"),
                                       set.config.value_or(DefaultModelConfig()),
                                       folder.name_of("tokenizer.json"));
  }
  return set;
}

}  // namespace aprfs
