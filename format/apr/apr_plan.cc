#include "format/apr/apr_plan.h"

#include <algorithm>
#include <limits>

#include "format/error.h"

namespace aprfs {
namespace {

void CheckTensor(const AprTensorSpec& tensor, const std::vector<TensorCodec>& codecs) {
  if (tensor.codec != kVerbatim) {
    if (tensor.codec >= codecs.size()) {
      throw FormatError("tensor " + Quote(tensor.name) + " refers to codec #" +
                        std::to_string(tensor.codec) + " of " + std::to_string(codecs.size()));
    }
    if (EncodedSize(codecs[tensor.codec]) != tensor.size) {
      throw FormatError("tensor " + Quote(tensor.name) + ": " + std::to_string(tensor.size) +
                        " bytes planned, but its " + EncodingName(codecs[tensor.codec].to) +
                        " encoding takes " + std::to_string(EncodedSize(codecs[tensor.codec])));
    }
  }
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

// The tensors' positions in index order: sorted by name (unsigned byte order, stable).
std::vector<uint32_t> IndexOrder(const std::vector<AprTensorSpec>& tensors) {
  std::vector<uint32_t> order(tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; });
  return order;
}

// Checks the tensors in data order and reports the first problem there: a name or shape the
// format cannot hold, or a name seen before. `order` finds the repeats without a hash map.
void CheckTensors(const std::vector<AprTensorSpec>& tensors, const std::vector<uint32_t>& order,
                  const std::vector<TensorCodec>& codecs) {
  size_t first_repeat = tensors.size();  // data position of the earliest second occurrence
  for (size_t k = 1; k < order.size(); ++k) {
    if (tensors[order[k]].name == tensors[order[k - 1]].name &&
        (k < 2 || tensors[order[k - 2]].name != tensors[order[k]].name)) {
      first_repeat = std::min<size_t>(first_repeat, order[k]);  // stable: order[k] is the 2nd
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckTensor(tensors[i], codecs);
    if (i == first_repeat) {
      throw FormatError("tensor " + Quote(tensors[i].name) +
                        " appears twice; APR names must be unique");
    }
  }
}

// Offsets relative to the data section, in data order; an alias takes its target's.
std::vector<uint64_t> AssignOffsets(const std::vector<AprTensorSpec>& tensors) {
  std::vector<uint64_t> relative_offsets(tensors.size(), 0);
  uint64_t cursor = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].alias_of) continue;
    relative_offsets[i] = cursor;
    cursor += AlignUp64(tensors[i].size);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AprTensorSpec& tensor = tensors[i];
    if (!tensor.alias_of) continue;
    const uint32_t target = *tensor.alias_of;
    if (target >= tensors.size()) {
      throw FormatError("tensor " + Quote(tensor.name) + " aliases tensor #" +
                        std::to_string(target) + " of a list of " +
                        std::to_string(tensors.size()));
    }
    if (tensors[target].alias_of || tensors[target].size != tensor.size) {
      throw FormatError("tensor " + Quote(tensor.name) + " aliases " +
                        Quote(tensors[target].name) +
                        ", which is not a stored tensor of the same size");
    }
    relative_offsets[i] = relative_offsets[target];
  }
  return relative_offsets;
}

}  // namespace

uint64_t AprIndexSize(const std::vector<AprTensorSpec>& tensors) {
  uint64_t size = 0;
  for (const AprTensorSpec& tensor : tensors) {
    size += AprIndexEntrySize(tensor.name.size(), tensor.shape.size());
  }
  return size;
}

FilePlan BuildAprPlan(std::string metadata_json,
                      const std::vector<AprTensorSpec>& tensors_in_data_order,
                      std::vector<TensorCodec> codecs) {
  const std::vector<AprTensorSpec>& tensors = tensors_in_data_order;
  if (metadata_json.size() > std::numeric_limits<uint32_t>::max()) {
    throw FormatError("metadata JSON is " + std::to_string(metadata_json.size()) +
                      " bytes; APR v2 stores its size in 32 bits");
  }
  if (tensors.size() > std::numeric_limits<uint32_t>::max()) {
    throw FormatError("too many tensors for APR v2's 32-bit tensor_count");
  }
  std::vector<uint32_t> order = IndexOrder(tensors);
  CheckTensors(tensors, order, codecs);
  std::vector<uint64_t> relative_offsets = AssignOffsets(tensors);

  AprHeaderFields header;
  header.tensor_count = static_cast<uint32_t>(tensors.size());
  header.metadata_size = static_cast<uint32_t>(metadata_json.size());
  header.tensor_index_offset = kAprHeaderSize + AlignUp64(metadata_json.size());
  header.data_offset = header.tensor_index_offset + AlignUp64(AprIndexSize(tensors));

  FilePlan plan;
  plan.tensor_count = header.tensor_count;
  plan.data_offset = header.data_offset;
  // The prefix is written in the metadata's own buffer: with enough capacity, no copy of it.
  plan.prefix = std::move(metadata_json);
  plan.prefix.reserve(header.data_offset);
  plan.prefix.insert(0, EncodeAprHeader(header));
  plan.prefix.resize(header.tensor_index_offset, '\0');
  for (uint32_t i : order) {
    const AprTensorSpec& tensor = tensors[i];
    AppendAprIndexEntry(plan.prefix, tensor.name, tensor.dtype, tensor.shape, relative_offsets[i],
                        tensor.size);
  }
  plan.prefix.resize(header.data_offset, '\0');

  uint64_t cursor = header.data_offset;
  size_t stored = 0;
  for (const AprTensorSpec& tensor : tensors) stored += !tensor.alias_of && tensor.size > 0;
  plan.extents.reserve(stored);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AprTensorSpec& tensor = tensors[i];
    if (tensor.alias_of) continue;
    if (tensor.size > 0) {
      plan.extents.push_back({header.data_offset + relative_offsets[i], tensor.size,
                              tensor.source, tensor.source_offset, tensor.codec});
    }
    cursor = header.data_offset + relative_offsets[i] + AlignUp64(tensor.size);
  }
  plan.footer_offset = cursor;
  plan.total_size = cursor + kAprFooterSize;
  plan.codecs = std::move(codecs);
  return plan;
}

}  // namespace aprfs
