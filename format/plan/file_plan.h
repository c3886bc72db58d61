#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/codec/tensor_codec.h"

namespace aprfs {

// An extent whose bytes are the source's own (no codec).
inline constexpr uint32_t kVerbatim = UINT32_MAX;

// A run of the virtual file whose bytes are source bytes, verbatim or through a codec. The
// bytes between one extent's end and the next extent's start (or the footer) are zero padding.
struct DataExtent {
  uint64_t offset = 0;  // absolute, in the virtual file
  uint64_t length = 0;
  uint32_t source = 0;  // index of the source (shard) and byte offset inside it
  uint64_t source_offset = 0;
  uint32_t codec = kVerbatim;  // position in FilePlan::codecs
};

// A virtual file of any format as data: every byte is in the prefix (computed from headers),
// an extent, padding, or the footer. The formats differ only in how they fill this in.
struct FilePlan {
  std::string prefix;                // header, metadata, index... with their padding
  std::vector<DataExtent> extents;   // sorted by offset, non-empty, non-overlapping
  std::vector<TensorCodec> codecs;   // of the computed extents
  uint32_t tensor_count = 0;
  uint64_t data_offset = 0;          // where tensor data starts (the prefix may hold some)
  // The APR footer: a CRC32 of every byte before it, 4 bytes at footer_offset. A format
  // without one has footer_offset == total_size.
  uint64_t footer_offset = 0;
  uint64_t total_size = 0;

  bool has_footer() const { return footer_offset < total_size; }
};

// Whether any byte of [begin, end) is computed through a codec.
bool AnyComputed(const FilePlan& plan, uint64_t begin, uint64_t end);

}  // namespace aprfs
