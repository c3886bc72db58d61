#include "format/plan/file_plan.h"

#include <algorithm>

namespace aprfs {

bool AnyComputed(const FilePlan& plan, uint64_t begin, uint64_t end) {
  if (plan.codecs.empty()) return false;
  auto it = std::upper_bound(plan.extents.begin(), plan.extents.end(), begin,
                             [](uint64_t value, const DataExtent& e) { return value < e.offset; });
  if (it != plan.extents.begin()) --it;
  for (; it != plan.extents.end() && it->offset < end; ++it) {
    if (it->codec != kVerbatim && it->offset + it->length > begin) return true;
  }
  return false;
}

}  // namespace aprfs
