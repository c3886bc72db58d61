#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/apr/apr_layout.h"

namespace aprfs {

// Reads up to `length` bytes at `offset` (fewer only at end of file).
using ReadAt = std::function<std::string(uint64_t offset, uint64_t length)>;

struct AprFile {
  AprHeaderFields header;
  uint32_t expected_checksum = 0;
  nlohmann::json metadata;            // parsed as aprender does: duplicate keys, last wins
  std::vector<AprIndexEntry> index;   // in file order
  uint64_t index_end = 0;             // absolute offset just past the last entry
  uint64_t file_size = 0;

  // aprender's required_file_len (§8.2): the end of the last padded payload.
  uint64_t RequiredLength() const;
  bool HasFooter() const { return file_size >= RequiredLength() + kAprFooterSize; }
};

// Parses an APR v2 file with exactly the checks of aprender's reader, in its order
// (apr-v2-format.md §10.1). Throws FormatError with aprender's message on the first failure.
AprFile ReadAprFile(const ReadAt& read_at, uint64_t file_size);

// What a well-formed file written by aprender's writer also satisfies, beyond what its reader
// checks: canonical offsets, alignment, payloads inside the file, sizes that match shapes,
// unique names, zero padding between sections, and no realizar alias keys in the metadata.
// Returns one message per problem; empty means the layout is clean. The footer CRC is checked
// separately, since it needs a pass over every byte.
std::vector<std::string> LintAprFile(const AprFile& file, const ReadAt& read_at);

// Byte size a plain dtype needs for the shape, or nullopt for block formats (Q4, Q8, Q4K, Q6K).
std::optional<uint64_t> AprPayloadSize(uint8_t dtype, const std::vector<uint64_t>& shape);

}  // namespace aprfs
