#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/apr/apr_reader.h"

namespace aprfs {

// What `aprfs inspect` and `aprfs verify` conclude about an APR file's bytes.
struct AprCheck {
  std::optional<AprFile> file;        // null when aprender's reader rejects it
  std::vector<std::string> problems;  // reader rejection, layout lint, footer mismatch
  std::string footer;                 // "ok 0x...", "absent (...)", "MISMATCH: ...", "not checked"

  bool valid() const { return problems.empty(); }
};

// Reads and lints the file; with `check_footer`, also CRCs every byte before the footer
// (`progress` gets the bytes done). `read_at` may throw std::runtime_error (a failed read).
AprCheck CheckAprFile(const ReadAt& read_at, uint64_t size, bool check_footer,
                      const std::function<void(uint64_t done, uint64_t total)>& progress = {});

// Reads of an open file for CheckAprFile: pread until `length` or end of file; throws
// std::runtime_error on a read error, or once `cancelled` says so.
ReadAt FileReadAt(int fd, std::function<bool()> cancelled = {});

// "0x0123ABCD".
std::string Hex32(uint32_t value);

}  // namespace aprfs
