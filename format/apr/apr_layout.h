#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace aprfs {

// Constants and byte-level encoders of the APR v2 container (apr-v2-format.md §2, §3, §5).

inline constexpr uint64_t kAprHeaderSize = 64;
inline constexpr uint64_t kAprAlignment = 64;
inline constexpr uint64_t kAprFooterSize = 4;
inline constexpr uint16_t kAprFlagRowMajor = 0x0400;
inline constexpr uint16_t kAprFlagColumnMajor = 0x0800;
inline constexpr size_t kAprMaxTensorName = 256;  // the writer's cap (MAX_TENSOR_NAME_LEN)
inline constexpr size_t kAprMaxDims = 8;          // the writer's cap
inline constexpr char kAprMagic[4] = {'A', 'P', 'R', '\0'};

// The dtype codes the importer and the views write (apr-v2-format.md §6.1).
inline constexpr uint8_t kAprF32 = 0;
inline constexpr uint8_t kAprF16 = 1;
inline constexpr uint8_t kAprQ4K = 12;
inline constexpr uint8_t kAprBf16 = 30;
inline constexpr uint8_t kAprQ4 = 128;
inline constexpr uint8_t kAprQ8 = 129;

constexpr uint64_t AlignUp64(uint64_t x) { return (x + 63) & ~uint64_t{63}; }

struct AprHeaderFields {
  uint8_t version_major = 2;
  uint8_t version_minor = 0;
  uint16_t flags = kAprFlagRowMajor;
  uint32_t tensor_count = 0;
  uint64_t metadata_offset = kAprHeaderSize;
  uint32_t metadata_size = 0;
  uint64_t tensor_index_offset = 0;
  uint64_t data_offset = 0;
  uint32_t checksum = 0;  // as stored; EncodeAprHeader computes it
  uint8_t magic[4] = {'A', 'P', 'R', '\0'};
};

// The 64 header bytes, with the checksum computed over bytes 0..39 ‖ 44..63 (§3.4).
std::string EncodeAprHeader(const AprHeaderFields& fields);
// Field by field, without any check.
AprHeaderFields DecodeAprHeader(std::string_view bytes64);
// The checksum the header bytes should carry.
uint32_t ComputeAprHeaderChecksum(std::string_view bytes64);

struct AprIndexEntry {
  std::string name;
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // relative to data_offset
  uint64_t size = 0;    // payload bytes, unpadded
};

// Appends one packed index entry (§5.1): u16 name_len, name, dtype, ndim, dims, offset, size.
void AppendAprIndexEntry(std::string& out, const AprIndexEntry& entry);
void AppendAprIndexEntry(std::string& out, std::string_view name, uint8_t dtype,
                         const std::vector<uint64_t>& shape, uint64_t offset, uint64_t size);
// Its size in bytes.
constexpr uint64_t AprIndexEntrySize(size_t name_len, size_t ndim) {
  return 2 + name_len + 1 + 1 + 8 * ndim + 8 + 8;
}

// Little-endian helpers shared by the encoders and the reader.
void AppendLe(std::string& out, uint64_t value, int bytes);
uint64_t LoadLe(std::string_view bytes, size_t at, int width);

}  // namespace aprfs
