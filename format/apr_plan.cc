#include "format/apr_plan.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "format/error.h"

namespace aprfs {
namespace {

void CheckTensor(const AprTensorSpec& tensor) {
  if (tensor.name.size() > kAprMaxTensorName) {
    throw FormatError("tensor " + Quote(tensor.name) + ": name is " +
                      std::to_string(tensor.name.size()) +
                      " bytes; APR v2 names are at most 256 bytes (MAX_TENSOR_NAME_LEN)");
  }
  if (tensor.shape.size() > kAprMaxDims) {
    throw FormatError("tensor " + Quote(tensor.name) + ": " + std::to_string(tensor.shape.size()) +
                      " dimensions; APR v2 stores at most 8");
  }
}

// Index entries with their data offsets, sorted by name (unsigned byte order, stable).
std::vector<AprIndexEntry> AssignOffsets(const std::vector<AprTensorSpec>& tensors,
                                         std::vector<uint64_t>& relative_offsets) {
  std::unordered_map<std::string_view, size_t> by_name;
  relative_offsets.assign(tensors.size(), 0);
  uint64_t cursor = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AprTensorSpec& tensor = tensors[i];
    CheckTensor(tensor);
    if (!by_name.emplace(tensor.name, i).second) {
      throw FormatError("tensor " + Quote(tensor.name) + " appears twice; APR names must be unique");
    }
    if (tensor.alias_of) continue;
    relative_offsets[i] = cursor;
    cursor += AlignUp64(tensor.size);
  }
  std::vector<AprIndexEntry> entries;
  entries.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AprTensorSpec& tensor = tensors[i];
    uint64_t offset = relative_offsets[i];
    if (tensor.alias_of) {
      auto target = by_name.find(*tensor.alias_of);
      if (target == by_name.end() || tensors[target->second].alias_of ||
          tensors[target->second].size != tensor.size) {
        throw FormatError("tensor " + Quote(tensor.name) + " aliases " + Quote(*tensor.alias_of) +
                          ", which is not a stored tensor of the same size");
      }
      offset = relative_offsets[target->second];
      relative_offsets[i] = offset;
    }
    entries.push_back({tensor.name, tensor.dtype, tensor.shape, offset, tensor.size});
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const AprIndexEntry& a, const AprIndexEntry& b) { return a.name < b.name; });
  return entries;
}

}  // namespace

AprPlan BuildAprPlan(const std::string& metadata_json,
                     const std::vector<AprTensorSpec>& tensors_in_data_order) {
  if (metadata_json.size() > std::numeric_limits<uint32_t>::max()) {
    throw FormatError("metadata JSON is " + std::to_string(metadata_json.size()) +
                      " bytes; APR v2 stores its size in 32 bits");
  }
  if (tensors_in_data_order.size() > std::numeric_limits<uint32_t>::max()) {
    throw FormatError("too many tensors for APR v2's 32-bit tensor_count");
  }
  std::vector<uint64_t> relative_offsets;
  std::vector<AprIndexEntry> entries = AssignOffsets(tensors_in_data_order, relative_offsets);

  std::string index;
  for (const AprIndexEntry& entry : entries) AppendAprIndexEntry(index, entry);

  AprHeaderFields header;
  header.tensor_count = static_cast<uint32_t>(entries.size());
  header.metadata_size = static_cast<uint32_t>(metadata_json.size());
  header.tensor_index_offset = kAprHeaderSize + AlignUp64(metadata_json.size());
  header.data_offset = header.tensor_index_offset + AlignUp64(index.size());

  AprPlan plan;
  plan.tensor_count = header.tensor_count;
  plan.data_offset = header.data_offset;
  plan.prefix.reserve(header.data_offset);
  plan.prefix = EncodeAprHeader(header);
  plan.prefix += metadata_json;
  plan.prefix.resize(header.tensor_index_offset, '\0');
  plan.prefix += index;
  plan.prefix.resize(header.data_offset, '\0');

  uint64_t cursor = header.data_offset;
  for (size_t i = 0; i < tensors_in_data_order.size(); ++i) {
    const AprTensorSpec& tensor = tensors_in_data_order[i];
    if (tensor.alias_of) continue;
    if (tensor.size > 0) {
      plan.extents.push_back({header.data_offset + relative_offsets[i], tensor.size,
                              tensor.source, tensor.source_offset});
    }
    cursor = header.data_offset + relative_offsets[i] + AlignUp64(tensor.size);
  }
  plan.footer_offset = cursor;
  plan.total_size = cursor + kAprFooterSize;
  return plan;
}

}  // namespace aprfs
