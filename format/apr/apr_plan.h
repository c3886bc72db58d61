#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/apr/apr_layout.h"
#include "format/codec/tensor_codec.h"

namespace aprfs {

// An extent whose bytes are the source's own (no codec).
inline constexpr uint32_t kVerbatim = UINT32_MAX;

// One tensor to place in the APR file, given in data order.
struct AprTensorSpec {
  std::string name;
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;
  uint64_t size = 0;            // payload bytes
  uint32_t source = 0;          // where the payload (or what it is computed from) lives:
  uint64_t source_offset = 0;   // source index and byte offset inside it
  // When set, the entry points at the bytes of the tensor at this position of the same list
  // instead of having its own (a tied lm_head.weight is the embedding, no copy).
  std::optional<uint32_t> alias_of;
  // kVerbatim, or the position in the plan's codecs of how the payload is computed from the
  // source bytes (then `size` is the codec's EncodedSize).
  uint32_t codec = kVerbatim;
};

// A tensor payload inside the virtual file. The bytes between one extent's end and the next
// extent's start (or the footer) are zero padding.
// Its bytes are source bytes, verbatim or through a codec.
struct AprDataExtent {
  uint64_t offset = 0;  // absolute, in the virtual file
  uint64_t length = 0;
  uint32_t source = 0;
  uint64_t source_offset = 0;
  uint32_t codec = kVerbatim;  // position in AprPlan::codecs
};

// The virtual file as data: every byte is in the prefix, an extent, padding, or the footer.
struct AprPlan {
  std::string prefix;                  // header + metadata + index with their padding
  std::vector<AprDataExtent> extents;  // sorted by offset, non-empty, non-overlapping
  std::vector<TensorCodec> codecs;     // of the computed extents
  uint32_t tensor_count = 0;
  uint64_t data_offset = 0;            // == prefix.size()
  uint64_t footer_offset = 0;
  uint64_t total_size = 0;             // footer_offset + 4
};

// Lays out an APR v2 file the way aprender's writer does (§2, §5, §7, §13): index sorted
// byte-wise by name, data in the given order, each payload 64-byte aligned with zero padding.
// Throws FormatError on input the format cannot hold (long names, too many dims, duplicate
// names, an alias to an unknown tensor, metadata over 4 GiB, a codec whose size disagrees).
// The prefix is built in `metadata_json`'s buffer: a caller that moves it in with a capacity
// of kAprHeaderSize + AlignUp64(its size) + AlignUp64(AprIndexSize(tensors)) saves a copy.
// `codecs` are the codecs the tensors refer to.
AprPlan BuildAprPlan(std::string metadata_json,
                     const std::vector<AprTensorSpec>& tensors_in_data_order,
                     std::vector<TensorCodec> codecs = {});

// Whether any byte of [begin, end) is computed through a codec.
bool AnyComputed(const AprPlan& plan, uint64_t begin, uint64_t end);

// Bytes the packed index of these tensors takes, padding not included (§5.1).
uint64_t AprIndexSize(const std::vector<AprTensorSpec>& tensors);

}  // namespace aprfs
