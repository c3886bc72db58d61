#include "fs/views/source_values.h"

namespace aprfs {

CodecScratch& ThreadCodecScratch() {
  thread_local CodecScratch scratch;
  return scratch;
}

int ReadSourceValues(const std::vector<std::shared_ptr<ByteSource>>& sources, uint32_t source,
                     uint64_t source_offset, const TensorCodec& codec, const ElementRange& range,
                     CodecScratch& scratch) {
  const uint64_t element_bytes = SourceElementBytes(codec.from);
  scratch.source.resize(range.count * element_bytes);
  if (int err = sources[source]->ReadKeepingCache(source_offset + range.first * element_bytes,
                                                  scratch.source.size(),
                                                  reinterpret_cast<char*>(scratch.source.data()))) {
    return err;
  }
  const ByteRange scales = ScaleBytesFor(codec, range);
  scratch.scales.resize(scales.length);
  if (scales.length > 0) {
    if (int err = sources[codec.scale_source]->ReadKeepingCache(
            codec.scale_offset + scales.offset, scales.length,
            reinterpret_cast<char*>(scratch.scales.data()))) {
      return err;
    }
  }
  scratch.values.resize(range.count);
  DecodeElements(codec, codec::BestKernels(), range, scratch.source.data(), scratch.scales.data(),
                 scratch.values.data());
  return 0;
}

}  // namespace aprfs
