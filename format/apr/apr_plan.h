#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/apr/apr_layout.h"
#include "format/codec/tensor_codec.h"
#include "format/plan/file_plan.h"

namespace aprfs {

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

// Lays out an APR v2 file the way aprender's writer does (§2, §5, §7, §13): index sorted
// byte-wise by name, data in the given order, each payload 64-byte aligned with zero padding.
// Throws FormatError on input the format cannot hold (long names, too many dims, duplicate
// names, an alias to an unknown tensor, metadata over 4 GiB, a codec whose size disagrees).
// The prefix is built in `metadata_json`'s buffer: a caller that moves it in with a capacity
// of kAprHeaderSize + AlignUp64(its size) + AlignUp64(AprIndexSize(tensors)) saves a copy.
// `codecs` are the codecs the tensors refer to.
FilePlan BuildAprPlan(std::string metadata_json,
                      const std::vector<AprTensorSpec>& tensors_in_data_order,
                      std::vector<TensorCodec> codecs = {});

// Bytes the packed index of these tensors takes, padding not included (§5.1).
uint64_t AprIndexSize(const std::vector<AprTensorSpec>& tensors);

}  // namespace aprfs
