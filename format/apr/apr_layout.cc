#include "format/apr/apr_layout.h"

#include "format/apr/crc32.h"

namespace aprfs {

void AppendLe(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

uint64_t LoadLe(std::string_view bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

uint32_t ComputeAprHeaderChecksum(std::string_view bytes64) {
  uint32_t crc = Crc32(bytes64.substr(0, 40));
  return Crc32(bytes64.substr(44, 20), crc);
}

std::string EncodeAprHeader(const AprHeaderFields& fields) {
  std::string out;
  out.reserve(kAprHeaderSize);
  out.append(reinterpret_cast<const char*>(fields.magic), 4);
  AppendLe(out, fields.version_major, 1);
  AppendLe(out, fields.version_minor, 1);
  AppendLe(out, fields.flags, 2);
  AppendLe(out, fields.tensor_count, 4);
  AppendLe(out, fields.metadata_offset, 8);
  AppendLe(out, fields.metadata_size, 4);
  AppendLe(out, fields.tensor_index_offset, 8);
  AppendLe(out, fields.data_offset, 8);
  AppendLe(out, 0, 4);     // checksum, filled below
  out.append(20, '\0');   // reserved
  uint32_t checksum = ComputeAprHeaderChecksum(out);
  for (int i = 0; i < 4; ++i) out[40 + i] = static_cast<char>((checksum >> (8 * i)) & 0xFF);
  return out;
}

AprHeaderFields DecodeAprHeader(std::string_view bytes64) {
  AprHeaderFields fields;
  for (int i = 0; i < 4; ++i) fields.magic[i] = static_cast<uint8_t>(bytes64[i]);
  fields.version_major = static_cast<uint8_t>(bytes64[4]);
  fields.version_minor = static_cast<uint8_t>(bytes64[5]);
  fields.flags = static_cast<uint16_t>(LoadLe(bytes64, 6, 2));
  fields.tensor_count = static_cast<uint32_t>(LoadLe(bytes64, 8, 4));
  fields.metadata_offset = LoadLe(bytes64, 12, 8);
  fields.metadata_size = static_cast<uint32_t>(LoadLe(bytes64, 20, 4));
  fields.tensor_index_offset = LoadLe(bytes64, 24, 8);
  fields.data_offset = LoadLe(bytes64, 32, 8);
  fields.checksum = static_cast<uint32_t>(LoadLe(bytes64, 40, 4));
  return fields;
}

void AppendAprIndexEntry(std::string& out, const AprIndexEntry& entry) {
  AppendAprIndexEntry(out, entry.name, entry.dtype, entry.shape, entry.offset, entry.size);
}

void AppendAprIndexEntry(std::string& out, std::string_view name, uint8_t dtype,
                         const std::vector<uint64_t>& shape, uint64_t offset, uint64_t size) {
  AppendLe(out, name.size(), 2);
  out += name;
  AppendLe(out, dtype, 1);
  AppendLe(out, shape.size(), 1);
  for (uint64_t dim : shape) AppendLe(out, dim, 8);
  AppendLe(out, offset, 8);
  AppendLe(out, size, 8);
}

}  // namespace aprfs
