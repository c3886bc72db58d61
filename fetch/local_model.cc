#include "fetch/local_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "fetch/local_file.h"
#include "fetch/model_folder.h"
#include "format/error.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;

// JSON side files bigger than this are refused rather than loaded into the daemon.
constexpr uint64_t kMaxJsonFile = 256ull << 20;

bool IsFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);  // follows symlinks
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::vector<std::string> AllSafetensorsIn(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (EndsWith(name, ".safetensors") && IsFile(entry.path())) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Shard ReadShardHeader(ByteSource& source, const std::string& file) {
  const std::string& path = source.name();
  Shard shard;
  shard.file = file;
  shard.size = source.size();
  std::string prefix(8, '\0');
  size_t prefix_len = std::min<uint64_t>(8, shard.size);
  if (source.Read(0, prefix_len, prefix.data()) != 0) {
    throw FormatError(path + ": cannot read the header length");
  }
  prefix.resize(prefix_len);
  uint64_t header_len = ParseSafetensorsHeaderLength(prefix, shard.size, path);
  std::string header(header_len, '\0');
  if (source.Read(8, header_len, header.data()) != 0) {
    throw FormatError(path + ": cannot read the header");
  }
  shard.header = ParseSafetensorsHeader(header, shard.size, path);
  return shard;
}

Shard ReadLocalShard(const std::string& dir, const std::string& file,
                     std::shared_ptr<LocalFile>& opened) {
  std::string path = (fs::path(dir) / file).string();
  try {
    opened = LocalFile::Open(path);
  } catch (const std::system_error& e) {
    throw FormatError("shard " + Quote(file) + " cannot be opened (" + e.code().message() + "): " +
                      path);
  }
  return ReadShardHeader(*opened, file);
}

std::string ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path + ": cannot be read");
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  if (size > max_bytes) {
    throw FormatError(path + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(max_bytes) + " allowed for this file");
  }
  std::string text(size, '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in) throw FormatError(path + ": read failed");
  return text;
}

bool FolderHasSafetensors(const std::string& dir) {
  return IsFile(fs::path(dir) / kWeightIndexFile) || !AllSafetensorsIn(dir).empty();
}

namespace {

// The model's small files (index, config, tokenizer) and the names of its shards.
ShardSet ReadModelFiles(const std::string& dir, const std::string& name,
                        const std::optional<std::string>& source_uri,
                        std::vector<std::string>& shard_files) {
  ModelFolder folder;
  folder.where = dir;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (IsFile(entry.path())) folder.files.insert(entry.path().filename().string());
  }
  folder.read = [&](const std::string& file) {
    return ReadSmallFile((fs::path(dir) / file).string(), kMaxJsonFile);
  };
  folder.name_of = [&](const std::string& file) { return (fs::path(dir) / file).string(); };
  ShardSet set = ReadModelFolder(folder, shard_files);
  set.name = name;
  set.source = source_uri;
  return set;
}

}  // namespace

LoadedModel LoadLocalModel(const std::string& dir, const std::string& name,
                           const std::optional<std::string>& source_uri,
                           std::vector<std::string>* files) {
  LoadedModel model;
  std::vector<std::string> shard_files;
  try {
    model.set = ReadModelFiles(dir, name, source_uri, shard_files);
  } catch (...) {
    // What the model would be built from is still worth watching for changes.
    if (files) *files = {std::string(kWeightIndexFile), "config.json", "tokenizer.json"};
    throw;
  }
  if (files) {
    *files = shard_files;
    files->insert(files->end(), {std::string(kWeightIndexFile), "config.json", "tokenizer.json"});
  }
  // The shards last: the tokenizer's parse (megabytes for a large vocabulary) then does not
  // add to 100k parsed tensor entries.
  model.set.shards.reserve(shard_files.size());
  model.sources.reserve(shard_files.size());
  for (const std::string& file : shard_files) {
    std::shared_ptr<LocalFile> opened;
    model.set.shards.push_back(ReadLocalShard(dir, file, opened));
    model.sources.push_back(std::move(opened));
  }
  model.read_text = [dir](const std::string& path) -> std::optional<std::string> {
    const fs::path file = fs::path(dir) / path;
    if (!IsFile(file)) return std::nullopt;
    return ReadSmallFile(file.string(), kMaxJsonFile);
  };
  model.reload = [dir, name, source_uri, shard_files, sources = model.sources] {
    std::vector<std::string> now;
    ShardSet set = ReadModelFiles(dir, name, source_uri, now);
    if (now != shard_files) throw FormatError(dir + ": the model's shards changed since it was planned");
    for (size_t i = 0; i < shard_files.size(); ++i) {
      set.shards.push_back(ReadShardHeader(*sources[i], shard_files[i]));
    }
    return set;
  };
  return model;
}

}  // namespace aprfs
