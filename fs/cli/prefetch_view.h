#pragma once

#include "fs/cli/model_target.h"

namespace aprfs {

// `aprfs prefetch` of a computed file in a mount (a view, or an .apr with dequantized FP8
// weights): reads it through the mount, bypassing the page cache, with a progress bar, so the
// daemon computes every chunk into its computed-chunk cache (and fetches what a remote model
// needs). Ctrl-C stops it (130); the next run resumes from the chunks stored. Exit code.
int PrefetchMountedView(const MountedModel& mounted, const std::string& label);

// True when the mounted file has computed bytes the mount keeps (its status has cached_bytes).
bool KeepsComputedBytes(const MountedModel& mounted);

}  // namespace aprfs
