#include "fs/views/value_scan.h"

#include <atomic>

#include "format/codec/kernels.h"
#include "fs/views/encode_pool.h"
#include "fs/views/source_values.h"

namespace aprfs {
namespace {

// Elements per read: a multiple of an AprQ4 block, as ValueStats::Add needs.
constexpr uint64_t kScanPiece = 1 << 20;

}  // namespace

int ScanValues(const std::vector<ScanItem>& items,
               const std::vector<std::shared_ptr<ByteSource>>& sources,
               std::vector<ValueStats>& stats) {
  stats.assign(items.size(), ValueStats{});
  std::atomic<int> error{0};
  EncodePool::Shared().ParallelFor(items.size(), [&](size_t i) {
    const ScanItem& item = items[i];
    const uint64_t elements = item.codec.elements();
    CodecScratch& scratch = ThreadCodecScratch();
    for (uint64_t first = 0; first < elements && error == 0; first += kScanPiece) {
      const ElementRange range{first, std::min(kScanPiece, elements - first)};
      if (int err = ReadSourceValues(sources, item.source, item.source_offset, item.codec, range,
                                     scratch)) {
        int none = 0;
        error.compare_exchange_strong(none, err);
        return;
      }
      stats[i].Add(scratch.values.data(), range.count, codec::BestKernels());
    }
    const uint64_t element_bytes = SourceElementBytes(item.codec.from);
    sources[item.source]->DropCached(item.source_offset, elements * element_bytes);
  });
  return error;
}

}  // namespace aprfs
