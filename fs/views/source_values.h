#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fetch/byte_source.h"
#include "format/codec/tensor_codec.h"

namespace aprfs {

// Buffers of one thread, reused by every piece of computed work it runs.
struct CodecScratch {
  std::vector<uint8_t> source;
  std::vector<uint8_t> scales;
  std::vector<float> values;   // the decoded elements
  std::vector<float> staging;  // for the encoders
  std::vector<uint8_t> out;
};
CodecScratch& ThreadCodecScratch();

// Reads the source elements `range` of a tensor whose bytes start at `source_offset` of
// sources[source] (plus an FP8 weight's scales for them) and decodes them to f32 into
// scratch.values. The pages read stay cached (see ByteSource::ReadKeepingCache). 0 or an errno.
int ReadSourceValues(const std::vector<std::shared_ptr<ByteSource>>& sources, uint32_t source,
                     uint64_t source_offset, const TensorCodec& codec, const ElementRange& range,
                     CodecScratch& scratch);

}  // namespace aprfs
