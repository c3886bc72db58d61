#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "format/codec/tensor_codec.h"
#include "format/plan/file_plan.h"

namespace aprfs {

// The GGUF v3 container (gguf-view.md §1): little endian, a 24-byte header, KV records, tensor
// infos, then the data section, every tensor aligned to 32 bytes in info order.

// The ggml tensor types the views write, with their ggml ids.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ5_0 = 6, kQ8_0 = 8, kQ4K = 12, kQ5K = 13, kQ6K = 14, kBF16 = 30
};
// Name, elements per block and bytes per block of a ggml type id: the types the views write
// and the other common ones a GGUF file may hold; null for the rest.
struct GgmlLayout {
  std::string_view name;
  uint64_t block;
  uint64_t bytes;
};
const GgmlLayout* FindGgmlLayout(uint32_t type_id);
// Elements per block and bytes per block.
uint64_t GgmlBlockElements(GgmlType type);
uint64_t GgmlBlockBytes(GgmlType type);
// Bytes of a tensor of `elements` elements whose rows (ne0) are whole blocks.
uint64_t GgmlTensorBytes(GgmlType type, uint64_t elements);
std::string_view GgmlTypeName(GgmlType type);

inline constexpr uint32_t kGgufAlignment = 32;

// KV records in insertion order. Setting a key again keeps its first position and takes the
// new value, as the converter's writer does. Counts, lengths and ids are u32, floats f32: the
// loader's getters insist on the converter's types (§1.9).
class GgufMetadata {
 public:
  void String(const std::string& key, std::string_view value);
  void U32(const std::string& key, uint32_t value);
  void I32(const std::string& key, int32_t value);
  void F32(const std::string& key, float value);
  void Bool(const std::string& key, bool value);
  void StringArray(const std::string& key, const std::vector<std::string>& values);
  void F32Array(const std::string& key, const std::vector<float>& values);
  void I32Array(const std::string& key, const std::vector<int32_t>& values);

  // Moves a record to the end, as ggml's gguf_set_val_* does with a key it sets again.
  void MoveToEnd(const std::string& key);

  bool Has(const std::string& key) const { return position_.count(key) > 0; }
  size_t size() const { return records_.size(); }
  // Every record, encoded: key, type, value.
  std::string Encode() const;

 private:
  void Put(const std::string& key, std::string encoded_value);
  std::vector<std::pair<std::string, std::string>> records_;  // key, type + payload
  std::map<std::string, size_t> position_;
};

// One tensor of the file: its info record and where its bytes come from.
struct GgufTensor {
  std::string name;            // < 64 bytes
  std::vector<uint64_t> ne;    // ggml order: ne[0] is the row length (numpy shape reversed)
  GgmlType type = GgmlType::kF32;
  // Its bytes, in order, covering exactly GgmlTensorBytes(type, elements): source extents
  // (offset relative to the tensor's first byte; codecs index the plan's codec list), or,
  // when `inline_bytes` is set, those bytes (small generated tensors such as rope_freqs).
  std::vector<DataExtent> pieces;
  std::string inline_bytes;

  bool is_inline() const { return !inline_bytes.empty(); }
  uint64_t elements() const;
  uint64_t bytes() const { return GgmlTensorBytes(type, elements()); }
};

// Lays the file out (§1.7): header, KVs, infos, padding to 32, then each tensor padded to 32.
// Inline tensors must come first (the converter writes its generated tensors first): their
// bytes go into the prefix. Throws FormatError naming the tensor when a name is 64 bytes or
// longer, a tensor has more than 4 dims, a row is not whole blocks, or pieces do not cover it.
FilePlan BuildGgufPlan(const GgufMetadata& metadata, const std::vector<GgufTensor>& tensors,
                       std::vector<TensorCodec> codecs);

}  // namespace aprfs
