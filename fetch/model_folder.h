#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "format/model/shard_set.h"

namespace aprfs {

// A folder that may hold a model, whatever keeps it: a directory, a Hub revision, an S3 prefix.
struct ModelFolder {
  std::string where;            // the folder, for errors: a path, REPO@COMMIT, s3://BUCKET/PREFIX
  std::set<std::string> files;  // the regular files directly in it (not in subfolders)
  // A small file's text (the index, config, tokenizer); throws FormatError naming it.
  std::function<std::string(const std::string& file)> read;
  // A file as errors name it.
  std::function<std::string(const std::string& file)> name_of;
};

// Which files make the model, the rule of transformers' loaders: the shards the index lists,
// else model.safetensors, else every *.safetensors (sorted); config.json and tokenizer.json when
// present. Fills `shard_files`; the set's name, source and shards are the caller's. Throws
// FormatError naming the file and the rule.
ShardSet ReadModelFolder(const ModelFolder& folder, std::vector<std::string>& shard_files);

}  // namespace aprfs
