#pragma once

#include <cstdint>
#include <string>

namespace aprfs::testing {

// Bytes free on the filesystem of `dir` for an unprivileged writer (statvfs f_bavail *
// f_frsize); 0 when it cannot be asked.
uint64_t FreeBytes(const std::string& dir);

// Writes `dir`/name until the filesystem refuses (ENOSPC), then frees space until `leave`
// bytes are free; the bytes still free.
uint64_t FillFilesystem(const std::string& dir, uint64_t leave = 0,
                        const std::string& name = "filler");

}  // namespace aprfs::testing
