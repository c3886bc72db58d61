#include "format/gguf/gguf_container.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "format/error.h"

namespace aprfs {
namespace {

enum ValueType : uint32_t {
  kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10,
};

void PutLe(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void PutString(std::string& out, std::string_view text) {
  PutLe(out, text.size(), 8);
  out.append(text);
}

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

const GgmlLayout* FindGgmlLayout(uint32_t type_id) {
  static const std::map<uint32_t, GgmlLayout> layouts = {
      {0, {"F32", 1, 4}},       {1, {"F16", 1, 2}},       {2, {"Q4_0", 32, 18}},
      {3, {"Q4_1", 32, 20}},    {6, {"Q5_0", 32, 22}},    {7, {"Q5_1", 32, 24}},
      {8, {"Q8_0", 32, 34}},    {9, {"Q8_1", 32, 36}},    {10, {"Q2_K", 256, 84}},
      {11, {"Q3_K", 256, 110}}, {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}}, {15, {"Q8_K", 256, 292}}, {24, {"I8", 1, 1}},
      {25, {"I16", 1, 2}},      {26, {"I32", 1, 4}},      {27, {"I64", 1, 8}},
      {28, {"F64", 1, 8}},      {30, {"BF16", 1, 2}},
  };
  auto it = layouts.find(type_id);
  return it == layouts.end() ? nullptr : &it->second;
}

// Every GgmlType is in the table.
static const GgmlLayout& LayoutOf(GgmlType type) {
  return *FindGgmlLayout(static_cast<uint32_t>(type));
}
uint64_t GgmlBlockElements(GgmlType type) { return LayoutOf(type).block; }
uint64_t GgmlBlockBytes(GgmlType type) { return LayoutOf(type).bytes; }
std::string_view GgmlTypeName(GgmlType type) { return LayoutOf(type).name; }

uint64_t GgmlTensorBytes(GgmlType type, uint64_t elements) {
  return elements / GgmlBlockElements(type) * GgmlBlockBytes(type);
}

void GgufMetadata::Put(const std::string& key, std::string encoded_value) {
  auto [it, inserted] = position_.emplace(key, records_.size());
  if (inserted) {
    records_.emplace_back(key, std::move(encoded_value));
  } else {
    records_[it->second].second = std::move(encoded_value);
  }
}

void GgufMetadata::MoveToEnd(const std::string& key) {
  auto it = position_.find(key);
  if (it == position_.end()) return;
  const size_t from = it->second;
  std::rotate(records_.begin() + from, records_.begin() + from + 1, records_.end());
  for (size_t i = from; i < records_.size(); ++i) position_[records_[i].first] = i;
}

void GgufMetadata::String(const std::string& key, std::string_view value) {
  std::string v;
  PutLe(v, kString, 4);
  PutString(v, value);
  Put(key, std::move(v));
}

void GgufMetadata::U32(const std::string& key, uint32_t value) {
  std::string v;
  PutLe(v, kUint32, 4);
  PutLe(v, value, 4);
  Put(key, std::move(v));
}

void GgufMetadata::I32(const std::string& key, int32_t value) {
  std::string v;
  PutLe(v, kInt32, 4);
  PutLe(v, static_cast<uint32_t>(value), 4);
  Put(key, std::move(v));
}

void GgufMetadata::F32(const std::string& key, float value) {
  std::string v;
  PutLe(v, kFloat32, 4);
  PutLe(v, FloatBits(value), 4);
  Put(key, std::move(v));
}

void GgufMetadata::Bool(const std::string& key, bool value) {
  std::string v;
  PutLe(v, kBool, 4);
  v += static_cast<char>(value ? 1 : 0);
  Put(key, std::move(v));
}

void GgufMetadata::StringArray(const std::string& key, const std::vector<std::string>& values) {
  std::string v;
  PutLe(v, kArray, 4);
  PutLe(v, kString, 4);
  PutLe(v, values.size(), 8);
  for (const std::string& value : values) PutString(v, value);
  Put(key, std::move(v));
}

void GgufMetadata::F32Array(const std::string& key, const std::vector<float>& values) {
  std::string v;
  PutLe(v, kArray, 4);
  PutLe(v, kFloat32, 4);
  PutLe(v, values.size(), 8);
  for (float value : values) PutLe(v, FloatBits(value), 4);
  Put(key, std::move(v));
}

void GgufMetadata::I32Array(const std::string& key, const std::vector<int32_t>& values) {
  std::string v;
  PutLe(v, kArray, 4);
  PutLe(v, kInt32, 4);
  PutLe(v, values.size(), 8);
  for (int32_t value : values) PutLe(v, static_cast<uint32_t>(value), 4);
  Put(key, std::move(v));
}

std::string GgufMetadata::Encode() const {
  std::string out;
  for (const auto& [key, value] : records_) {
    PutString(out, key);
    out += value;
  }
  return out;
}

uint64_t GgufTensor::elements() const {
  uint64_t count = 1;
  for (uint64_t n : ne) count *= n;
  return count;
}

FilePlan BuildGgufPlan(const GgufMetadata& metadata, const std::vector<GgufTensor>& tensors,
                       std::vector<TensorCodec> codecs) {
  FilePlan plan;
  std::string& out = plan.prefix;
  out.append("GGUF", 4);
  PutLe(out, 3, 4);
  PutLe(out, tensors.size(), 8);
  PutLe(out, metadata.size(), 8);
  out += metadata.Encode();
  uint64_t offset = 0;  // in the data section
  bool inline_allowed = true;
  for (const GgufTensor& tensor : tensors) {
    const std::string what = "tensor " + Quote(tensor.name);
    if (tensor.name.size() >= 64) throw FormatError(what + ": GGUF names are under 64 bytes");
    if (tensor.ne.empty() || tensor.ne.size() > 4) {
      throw FormatError(what + ": GGUF tensors have 1 to 4 dimensions, not " +
                        std::to_string(tensor.ne.size()));
    }
    if (tensor.ne[0] % GgmlBlockElements(tensor.type) != 0) {
      throw FormatError(what + ": rows of " + std::to_string(tensor.ne[0]) + " elements are not " +
                        "whole " + std::string(GgmlTypeName(tensor.type)) + " blocks");
    }
    if (tensor.is_inline() && !inline_allowed) {
      throw FormatError(what + ": generated tensors must come first");
    }
    inline_allowed = inline_allowed && tensor.is_inline();
    PutString(out, tensor.name);
    PutLe(out, tensor.ne.size(), 4);
    for (uint64_t n : tensor.ne) PutLe(out, n, 8);
    PutLe(out, static_cast<uint32_t>(tensor.type), 4);
    PutLe(out, offset, 8);
    offset += AlignUp(tensor.bytes(), kGgufAlignment);
  }
  out.resize(AlignUp(out.size(), kGgufAlignment), '\0');
  plan.data_offset = out.size();
  uint64_t at = plan.data_offset;
  for (const GgufTensor& tensor : tensors) {
    const std::string what = "tensor " + Quote(tensor.name);
    const uint64_t bytes = tensor.bytes();
    if (tensor.is_inline()) {
      if (tensor.inline_bytes.size() != bytes) {
        throw FormatError(what + ": " + std::to_string(tensor.inline_bytes.size()) +
                          " generated bytes for a tensor of " + std::to_string(bytes));
      }
      out += tensor.inline_bytes;
      out.resize(AlignUp(out.size(), kGgufAlignment), '\0');
    } else {
      uint64_t covered = 0;
      for (const DataExtent& piece : tensor.pieces) {
        if (piece.offset != covered || piece.length == 0) {
          throw FormatError(what + ": its pieces leave a gap or overlap at byte " +
                            std::to_string(covered));
        }
        DataExtent extent = piece;
        extent.offset = at + piece.offset;
        plan.extents.push_back(extent);
        covered += piece.length;
      }
      if (covered != bytes) {
        throw FormatError(what + ": its pieces hold " + std::to_string(covered) + " of its " +
                          std::to_string(bytes) + " bytes");
      }
    }
    at += AlignUp(bytes, kGgufAlignment);
  }
  plan.codecs = std::move(codecs);
  plan.tensor_count = static_cast<uint32_t>(tensors.size());
  plan.footer_offset = plan.total_size = at;
  return plan;
}

}  // namespace aprfs
