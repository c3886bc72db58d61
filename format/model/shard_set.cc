#include "format/model/shard_set.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <map>

#include "format/error.h"
#include "format/model/weight_index_sax.h"

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
WeightMapEntries WeightMapFromDom(std::string_view text, std::string_view file) {
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
  WeightMapEntries entries;
  std::map<std::string, uint32_t> shard_ids;
  for (const auto& [tensor, shard] : map->items()) {  // by name, each name once
    if (!shard.is_string()) {
      throw FormatError(std::string(file) + ": weight_map value of tensor " + Quote(tensor) +
                        " must be a file name string");
    }
    const std::string& path = shard.get_ref<const std::string&>();
    CheckShardPath(path, tensor, file);
    auto [it, added] = shard_ids.emplace(path, entries.shards.size());
    if (added) entries.shards.push_back(path);
    entries.tensors.emplace_back(tensor, it->second);
  }
  return entries;
}

}  // namespace

const std::string* WeightIndex::ShardOf(std::string_view tensor) const {
  auto it = std::lower_bound(weight_map.begin(), weight_map.end(), tensor,
                             [](const auto& entry, std::string_view name) { return entry.first < name; });
  if (it == weight_map.end() || it->first != tensor) return nullptr;
  return &shard_files[it->second];
}

WeightIndex ParseWeightIndex(std::string_view text, std::string_view file) {
  std::optional<WeightMapEntries> entries = ReadWellFormedWeightMap(text);
  if (!entries) entries = WeightMapFromDom(text, file);
  // The paths in tensor name order, as the DOM path checks them: the first bad one is named.
  std::vector<bool> checked(entries->shards.size(), false);
  for (const auto& [tensor, shard] : entries->tensors) {
    if (checked[shard]) continue;
    CheckShardPath(entries->shards[shard], tensor, file);
    checked[shard] = true;
  }
  if (entries->tensors.empty()) throw FormatError(std::string(file) + ": weight_map is empty");
  WeightIndex index;
  index.shard_files = entries->shards;
  std::sort(index.shard_files.begin(), index.shard_files.end());
  std::vector<uint32_t> sorted_id(entries->shards.size());
  for (uint32_t id = 0; id < sorted_id.size(); ++id) {
    sorted_id[id] = static_cast<uint32_t>(
        std::lower_bound(index.shard_files.begin(), index.shard_files.end(), entries->shards[id]) -
        index.shard_files.begin());
  }
  for (auto& entry : entries->tensors) entry.second = sorted_id[entry.second];
  index.weight_map = std::move(entries->tensors);
  return index;
}

void CheckShardSet(const ShardSet& set) {
  // Every tensor of every shard, in shard then header order, then sorted by name (stable): no
  // hash map of 100k names.
  struct Owned {
    const std::string* name;
    uint32_t shard;
    uint32_t position;  // in shard then header order
  };
  std::vector<Owned> tensors;
  size_t count = 0;
  for (const Shard& shard : set.shards) count += shard.header.tensors.size();
  tensors.reserve(count);
  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    for (const SafetensorsTensor& tensor : set.shards[s].header.tensors) {
      tensors.push_back({&tensor.name, s, static_cast<uint32_t>(tensors.size())});
    }
  }
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const Owned& a, const Owned& b) { return *a.name < *b.name; });
  // The name met a second time first, in shard then header order, is the one reported.
  const Owned* first = nullptr;
  const Owned* second = nullptr;
  for (size_t k = 1; k < tensors.size(); ++k) {
    if (*tensors[k].name != *tensors[k - 1].name) continue;
    if (k >= 2 && *tensors[k - 2].name == *tensors[k].name) continue;  // third and later
    if (!second || tensors[k].position < second->position) {
      first = &tensors[k - 1];
      second = &tensors[k];
    }
  }
  if (second) {
    throw FormatError("tensor " + Quote(*second->name) + " is in both " +
                      Quote(set.shards[first->shard].file) + " and " +
                      Quote(set.shards[second->shard].file) +
                      "; a tensor must live in exactly one shard");
  }
  if (!set.index) return;
  for (const auto& [tensor, shard] : set.index->weight_map) {
    const std::string& shard_file = set.index->shard_files[shard];
    auto it = std::lower_bound(tensors.begin(), tensors.end(), tensor,
                               [](const Owned& owned, const std::string& name) {
                                 return *owned.name < name;
                               });
    bool found = it != tensors.end() && *it->name == tensor;
    const std::string* owner = found ? &set.shards[it->shard].file : nullptr;
    if (!found || *owner != shard_file) {
      throw FormatError(std::string(kWeightIndexFile) + ": tensor " + Quote(tensor) +
                        " is mapped to " + Quote(shard_file) + " but that shard has no such tensor" +
                        (!found ? "" : " (it is in " + Quote(*owner) + ")"));
    }
  }
}

}  // namespace aprfs
