#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fs/status_snapshot.h"

namespace aprfs {

// `.aprfs/status.json`: the snapshot as JSON (field names are an interface: `aprfs status`,
// `prefetch` and `verify` read them).
std::string RenderStatusJson(const MountStatus& status);

// `.aprfs/metrics`: the same figures in the Prometheus text exposition format 0.0.4 (HELP and
// TYPE before each family, counters named *_total, one `model` label per model).
std::string RenderMetrics(const MountStatus& status);

// The `user.aprfs.*` extended attributes of one file of a model (its .apr or a view), as
// plain-text values, in a fixed order. Attributes without a value (no known revision) are left
// out.
std::vector<std::pair<std::string, std::string>> ModelXattrs(const ModelStatus& model,
                                                            ViewKind view = ViewKind::kApr);

}  // namespace aprfs
