#include "format/apr/crc32.h"

#include <isa-l/crc.h>
#include <zlib.h>

namespace aprfs {

// ISA-L's folding CRC runs ~3x faster than zlib's here (10.8 vs 3.7 GB/s), and this CRC is
// on the read path; it computes the same checksum and chains the same way.
uint32_t Crc32(std::string_view bytes, uint32_t crc) {
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(length_b)));
}

}  // namespace aprfs
