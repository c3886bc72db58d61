#include "format/shard_set.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "format/error.h"
#include "format/weight_index_sax.h"

namespace aprfs {
namespace {

using nlohmann::json;

// A weight_map value must name a file inside the model folder.
void CheckShardPath(const std::string& path, const std::string& tensor, std::string_view file) {
  auto fail = [&](const char* rule) {
    throw FormatError(std::string(file) + ": tensor " + Quote(tensor) + " maps to shard " +
                      Quote(path) + ": " + rule);
  };
  if (path.empty()) fail("shard name is empty");
  if (path.front() == '/') fail("shard path is absolute; it must be relative to the model folder");
  if (path.find('\\') != std::string::npos || path.find('\0') != std::string::npos) {
    fail("shard path contains a backslash or NUL byte");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view segment(path.data() + start, end - start);
    if (segment == "..") fail("shard path contains '..'; it must stay inside the model folder");
    if (segment.empty() || segment == ".") fail("shard path has an empty or '.' segment");
    start = end + 1;
  }
}

// The weight_map through the DOM, to name what makes the text unfit for the fast path.
std::map<std::string, std::string> WeightMapFromDom(std::string_view text, std::string_view file) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(std::string(file) + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw FormatError(std::string(file) + ": must be a JSON object");
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object()) {
    throw FormatError(std::string(file) + ": has no \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) {
      throw FormatError(std::string(file) + ": weight_map value of tensor " + Quote(tensor) +
                        " must be a file name string");
    }
    const std::string& path = shard.get_ref<const std::string&>();
    CheckShardPath(path, tensor, file);
    weight_map[tensor] = path;
  }
  return weight_map;
}

}  // namespace

WeightIndex ParseWeightIndex(std::string_view text, std::string_view file) {
  WeightIndex index;
  if (auto weight_map = ReadWellFormedWeightMap(text)) {
    index.weight_map = std::move(*weight_map);
  } else {
    index.weight_map = WeightMapFromDom(text, file);
  }
  std::set<std::string> shard_files;
  for (const auto& [tensor, path] : index.weight_map) {
    CheckShardPath(path, tensor, file);  // in name order, as the DOM path checks them
    if (shard_files.empty() || *shard_files.rbegin() != path) shard_files.insert(path);
  }
  if (index.weight_map.empty()) throw FormatError(std::string(file) + ": weight_map is empty");
  index.shard_files.assign(shard_files.begin(), shard_files.end());
  return index;
}

void CheckShardSet(const ShardSet& set) {
  std::unordered_map<std::string_view, const std::string*> owner;  // tensor -> shard file
  for (const Shard& shard : set.shards) {
    for (const SafetensorsTensor& tensor : shard.header.tensors) {
      auto [it, inserted] = owner.emplace(tensor.name, &shard.file);
      if (!inserted) {
        throw FormatError("tensor " + Quote(tensor.name) + " is in both " + Quote(*it->second) +
                          " and " + Quote(shard.file) + "; a tensor must live in exactly one shard");
      }
    }
  }
  if (!set.index) return;
  for (const auto& [tensor, shard_file] : set.index->weight_map) {
    auto it = owner.find(tensor);
    if (it == owner.end() || *it->second != shard_file) {
      throw FormatError(std::string(kWeightIndexFile) + ": tensor " + Quote(tensor) +
                        " is mapped to " + Quote(shard_file) + " but that shard has no such tensor" +
                        (it == owner.end() ? "" : " (it is in " + Quote(*it->second) + ")"));
    }
  }
}

}  // namespace aprfs
