#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fetch/byte_source.h"
#include "fetch/local_file.h"
#include "format/model/shard_set.h"

namespace aprfs {

// A model read from a local folder: its shard set (headers, config, tokenizer) and one open
// source per shard, in the same order.
struct LoadedModel {
  ShardSet set;
  std::vector<std::shared_ptr<ByteSource>> sources;
  // The same shard set again, for plans built later (a view first looked up long after the
  // mount): the headers read through the same sources, the small files read again. Throws
  // FormatError when the model's files no longer match the sources.
  std::function<ShardSet()> reload;
  // A small file of the model (tokenizer_config.json, tokenizer.model...) by its path in the
  // folder or repo, read when asked; nullopt when the model has none. Throws FormatError when
  // it exists but cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> read_text;
};

// Which files of a folder make a model: the index's shards, else model.safetensors, else every
// *.safetensors (sorted). Empty when the folder holds no safetensors.
bool FolderHasSafetensors(const std::string& dir);

// Reads the shard headers and the small JSON files of the model in `dir` (symlinks followed,
// as in the HF cache). Throws FormatError naming the file and the rule. `files`, when given,
// receives every path (relative to `dir`) the model is built from as soon as it is known, even
// when loading then fails, so a caller can watch them for changes.
LoadedModel LoadLocalModel(const std::string& dir, const std::string& name,
                           const std::optional<std::string>& source_uri,
                           std::vector<std::string>* files = nullptr);

// Opens the shard `file` of `dir` and parses its header. Throws FormatError naming the path.
Shard ReadLocalShard(const std::string& dir, const std::string& file,
                     std::shared_ptr<LocalFile>& opened);
// Parses the header of shard `file` through its open source. Throws FormatError naming it.
Shard ReadShardHeader(ByteSource& source, const std::string& file);

// Reads a whole small file (config.json, tokenizer.json...); refuses files above `max_bytes`.
std::string ReadSmallFile(const std::string& path, uint64_t max_bytes);

}  // namespace aprfs
