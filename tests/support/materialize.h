#pragma once

// Builds the whole file a plan describes, the simple way (copy every piece, CRC with zlib), as
// the reference the virtual file and the readers are checked against.

#include <string>
#include <vector>

#include "format/apr/apr_plan.h"

namespace aprfs::testing {

// `sources[i]` holds the bytes of plan source i (a whole shard file, or a payload buffer).
std::string MaterializePlan(const FilePlan& plan, const std::vector<std::string>& sources);

// zlib's CRC32, independent of format/crc32.
uint32_t ZlibCrc32(std::string_view bytes);

}  // namespace aprfs::testing
