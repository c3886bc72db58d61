#include "format/views/merged_safetensors.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"

namespace aprfs {
namespace {

struct Placed {
  const SafetensorsTensor* tensor;
  uint32_t shard;
};

std::string JsonString(const std::string& text) { return nlohmann::json(text).dump(); }

// The shards' metadata when every shard carries the same map, with "format": "pt" when none is
// given (transformers refuses a missing or unknown format); else only the format.
std::map<std::string, std::string> MergedMetadata(const ShardSet& set) {
  std::map<std::string, std::string> metadata;
  if (!set.shards.empty()) {
    metadata = set.shards.front().header.metadata;
    for (const Shard& shard : set.shards) {
      if (shard.header.metadata != metadata) {
        metadata.clear();
        break;
      }
    }
  }
  metadata.emplace("format", "pt");  // kept when the shards give one
  return metadata;
}

}  // namespace

FilePlan PlanMergedSafetensors(const ShardSet& set) {
  std::vector<Placed> placed;
  for (uint32_t i = 0; i < set.shards.size(); ++i) {
    for (const SafetensorsTensor& tensor : set.shards[i].header.tensors) placed.push_back({&tensor, i});
  }
  // The official writer's order: alignment (element size) descending, then name. With no
  // padding allowed between tensors, this is what keeps every tensor aligned to its element.
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    const unsigned bits_a = StDtypeBits(a.tensor->dtype), bits_b = StDtypeBits(b.tensor->dtype);
    if (bits_a != bits_b) return bits_a > bits_b;
    return a.tensor->name < b.tensor->name;
  });

  std::string header = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [key, value] : MergedMetadata(set)) {
    if (!first) header += ',';
    first = false;
    header += JsonString(key) + ":" + JsonString(value);
  }
  header += '}';
  uint64_t data_size = 0;
  for (const Placed& p : placed) {
    const SafetensorsTensor& tensor = *p.tensor;
    header += "," + JsonString(tensor.name) + ":{\"dtype\":\"" +
              std::string(StDtypeName(tensor.dtype)) + "\",\"shape\":[";
    for (size_t d = 0; d < tensor.shape.size(); ++d) {
      if (d) header += ',';
      header += std::to_string(tensor.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(data_size) + "," +
              std::to_string(data_size + tensor.size()) + "]}";
    data_size += tensor.size();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  if (header.size() > kMaxSafetensorsHeaderLen) {
    throw FormatError(set.name + ".safetensors: the merged header of " +
                      std::to_string(placed.size()) + " tensors would take " +
                      std::to_string(header.size()) + " bytes, more than the " +
                      std::to_string(kMaxSafetensorsHeaderLen) +
                      " the safetensors reader accepts (HeaderTooLarge)");
  }

  FilePlan plan;
  plan.prefix.reserve(8 + header.size());
  for (int i = 0; i < 8; ++i) plan.prefix += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  plan.prefix += header;
  plan.data_offset = plan.prefix.size();
  uint64_t offset = plan.data_offset;
  for (const Placed& p : placed) {
    const SafetensorsTensor& tensor = *p.tensor;
    if (tensor.size() > 0) {
      plan.extents.push_back({offset, tensor.size(), p.shard,
                              set.shards[p.shard].header.data_start() + tensor.begin, kVerbatim});
    }
    offset += tensor.size();
  }
  plan.tensor_count = static_cast<uint32_t>(placed.size());
  plan.footer_offset = plan.total_size = offset;
  return plan;
}

}  // namespace aprfs
