#pragma once

#include <cstdint>
#include <string_view>

namespace aprfs {

// CRC-32/ISO-HDLC (zlib's crc32, computed with ISA-L), the checksum of the APR header and
// footer.
// `crc` continues a running checksum; start from 0.
uint32_t Crc32(std::string_view bytes, uint32_t crc = 0);

// CRC of A‖B from CRC(A), CRC(B) and |B|, without touching the bytes (zlib crc32_combine).
uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace aprfs
