#include "format/gguf/gguf_container.h"

#include <cstring>

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

uint64_t GgmlBlockElements(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: return 32;
    case GgmlType::kQ4K:
    case GgmlType::kQ6K: return 256;
    default: return 1;
  }
}

uint64_t GgmlBlockBytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return 18;
    case GgmlType::kQ8_0: return 34;
    case GgmlType::kQ4K: return 144;
    case GgmlType::kQ6K: return 210;
  }
  return 0;
}

uint64_t GgmlTensorBytes(GgmlType type, uint64_t elements) {
  return elements / GgmlBlockElements(type) * GgmlBlockBytes(type);
}

std::string_view GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ4K: return "Q4_K";
    case GgmlType::kQ6K: return "Q6_K";
  }
  return "?";
}

void GgufMetadata::Put(const std::string& key, std::string encoded_value) {
  auto [it, inserted] = position_.emplace(key, records_.size());
  if (inserted) {
    records_.emplace_back(key, std::move(encoded_value));
  } else {
    records_[it->second].second = std::move(encoded_value);
  }
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
    if (tensor.is_inline && !inline_allowed) {
      throw FormatError(what + ": generated tensors must come first");
    }
    inline_allowed = inline_allowed && tensor.is_inline;
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
    if (tensor.is_inline) {
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
