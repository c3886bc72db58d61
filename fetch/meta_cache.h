#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace aprfs {

// The metadata cache of remote models (<cache-dir>/meta): small files written whole, read by
// later mounts, also offline.

// The file's content, or nullopt when it is absent, not a regular file, unreadable or bigger
// than `max_bytes`.
std::optional<std::string> ReadFileIfExists(const std::string& path, uint64_t max_bytes);

// Temp file + rename, so a reader (another mount) never sees half a file; folders created as
// needed. A failure (a full disk) is logged and leaves no file: the cache is an optimisation.
void WriteAtomically(const std::string& path, std::string_view content);

}  // namespace aprfs
