#pragma once

#include <memory>
#include <vector>

#include "fetch/byte_source.h"
#include "format/views/value_checks.h"

namespace aprfs {

// Reads every tensor of `items` once (several tensors at a time, each front to back) and
// accumulates the statistics the single-file path's checks need. 0, or the errno of a source
// read that failed.
int ScanValues(const std::vector<ScanItem>& items,
               const std::vector<std::shared_ptr<ByteSource>>& sources,
               std::vector<ValueStats>& stats);

}  // namespace aprfs
