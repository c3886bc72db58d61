#include "fs/views/view_cache.h"

#include <spdlog/spdlog.h>

#include "fetch/sha256.h"

namespace aprfs {
namespace {

void AppendNumber(std::string& out, uint64_t value) { out += std::to_string(value) + ","; }

}  // namespace

std::string ComputedStoreKey(const FilePlan& plan,
                             const std::vector<std::shared_ptr<ByteSource>>& sources,
                             ViewKind view) {
  std::string what = "aprfs computed file\nencoder " + std::to_string(kEncoderVersion) +
                     "\nview " + std::string(ViewName(view)) + "\n";
  for (const auto& source : sources) what += "source " + source->identity() + "\n";
  what += "prefix " + Sha256Hex(plan.prefix) + "\n";
  std::string layout;
  for (const DataExtent& e : plan.extents) {
    for (uint64_t value : {e.offset, e.length, uint64_t{e.source}, e.source_offset, uint64_t{e.codec}}) {
      AppendNumber(layout, value);
    }
  }
  for (const TensorCodec& c : plan.codecs) {
    for (uint64_t value : {uint64_t(c.from), uint64_t(c.to), uint64_t(c.row_padded), c.rows, c.cols,
                           uint64_t(c.scale_dtype), uint64_t{c.block_rows}, uint64_t{c.block_cols},
                           uint64_t{c.scale_source}, c.scale_offset}) {
      AppendNumber(layout, value);
    }
    if (c.round_to_f16) layout += "f16,";  // only when set: older keys stay valid
    if (c.add_one) layout += "+1,";
  }
  what += "layout " + Sha256Hex(layout) + "\n";
  return "view-" + Sha256Hex(what).substr(0, 32);
}

ComputeSettings ComputedStorage(const FilePlan& plan,
                                const std::vector<std::shared_ptr<ByteSource>>& sources,
                                ViewKind view, const ComputedCache& cache, const std::string& what) {
  ComputeSettings settings;
  if (cache.chunks == nullptr || plan.codecs.empty()) return settings;
  std::string dir = cache.chunks->root() + "/" + ComputedStoreKey(plan, sources, view);
  try {
    settings.store = ChunkStore::Open(dir, plan.footer_offset, kComputedChunkSize);
    settings.cache = cache.chunks;
    settings.writer = cache.writer;
  } catch (const std::exception& e) {
    spdlog::warn("{}: computed bytes will not be cached: {}", what, e.what());
  }
  return settings;
}

}  // namespace aprfs
