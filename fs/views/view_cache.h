#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fetch/byte_source.h"
#include "fetch/chunk_cache.h"
#include "format/apr/apr_plan.h"
#include "format/views/view_kind.h"
#include "fs/virtual_file.h"

namespace aprfs {

// Chunks of computed files on disk: 4 MiB, so a random read computes little more than it needs.
inline constexpr uint32_t kComputedChunkSize = 4u << 20;
// Bumped whenever an encoder's bytes change: computed chunks of another version are never read.
inline constexpr int kEncoderVersion = 1;

// The name of a computed file's chunk store: a hash of what its bytes are a function of (the
// sources' identities, the plan, the view, the encoder version).
std::string ComputedStoreKey(const FilePlan& plan,
                             const std::vector<std::shared_ptr<ByteSource>>& sources,
                             ViewKind view);

// Where computed chunks go: the cache (and its size limit) and the writer that stores them.
struct ComputedCache {
  ChunkCache* chunks = nullptr;
  ComputedChunkWriter* writer = nullptr;
};

// The compute settings of a file with this plan: its chunk store in the cache (none without a
// cache, or when the plan computes nothing, or when the store cannot be opened: then every
// byte is recomputed, with a warning).
ComputeSettings ComputedStorage(const FilePlan& plan,
                                const std::vector<std::shared_ptr<ByteSource>>& sources,
                                ViewKind view, const ComputedCache& cache, const std::string& what);

}  // namespace aprfs
