#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fs/catalog.h"

namespace aprfs {

// The figures of `.aprfs/status.json`, `.aprfs/metrics` and the xattrs, as plain data: collected
// once (a snapshot), then rendered. Every figure is read from the object that produces it (FUSE
// read counters, RemoteFile stats, chunk stores), never estimated.

struct ShardStatus {
  std::string file;  // path inside the model ("model-00001-of-00002...")
  uint64_t size = 0;
  std::optional<std::string> sha256;      // the Hub's, or the HF cache blob's name
  std::optional<std::string> local_path;  // when read from a local file
  uint64_t cached_bytes = 0;              // chunks present (remote), = size (local)
  std::optional<bool> published;          // remote shards: moved into the HF cache
  std::optional<std::string> cache_error;  // remote shards: the last failure to store/publish
};

// One file of a model: its .apr or a computed view.
struct ViewStatus {
  std::string view;  // "apr", "q4k"...
  std::string file;  // "phi-4.q4k.apr"
  // "not-planned" (not looked up yet), "ready", "unchecked" (a single-file model's values not
  // checked yet), "refused" (why in `error`)
  std::string state;
  std::string error;
  std::optional<uint64_t> size;
  uint64_t bytes_read = 0;
  uint64_t reads = 0;
  uint64_t errors = 0;
  uint64_t bytes_computed = 0;        // encoded output bytes
  uint64_t source_bytes_encoded = 0;  // source bytes the encoders consumed
  uint64_t encode_ns = 0;             // thread time spent reading and encoding them
  uint64_t cache_hits = 0;            // computed chunks served from the cache
  uint64_t cache_misses = 0;          // computed chunks that had to be computed
  uint64_t cache_stored_bytes = 0;
  uint64_t cache_pending_bytes = 0;   // computed, queued to be stored
  std::optional<uint64_t> cached_bytes;  // computed bytes in the cache now

  // Source bytes consumed per second of encoding (0 before any).
  double EncodeBytesPerSecond() const {
    return encode_ns ? static_cast<double>(source_bytes_encoded) * 1e9 / static_cast<double>(encode_ns) : 0;
  }
};

struct ModelStatus {
  // Paths in the mount: "phi-4.apr", "microsoft/phi-4.apr". A rejected model keeps the paths
  // it claims (it is shown once valid); a model that lost every name to others has none.
  std::vector<std::string> names;
  std::string key;                      // "hf:microsoft/phi-4", "dir:/srv/models/x"
  std::string kind;                     // "local", "hf-cache" or "remote"
  std::string source;                   // "hf://microsoft/phi-4", "file:///srv/models/x"
  std::optional<std::string> revision;  // the commit, when known
  std::optional<std::string> requested_revision;  // remote: what --repo asked for ("main")
  std::string state;             // "not-yet-looked-up", "building", "ready" or "error"
  std::string error;             // state "error": why
  std::optional<uint64_t> size;  // of the .apr (state "ready")
  std::optional<uint32_t> tensors;
  std::vector<ShardStatus> shards;
  uint64_t cached_bytes = 0;  // sum over the shards
  uint64_t bytes_read = 0;    // served to readers of the .apr
  uint64_t reads = 0;
  uint64_t errors = 0;         // reads answered with EIO
  uint64_t bytes_fetched = 0;  // from the network
  uint64_t requests = 0;       // HTTP range requests for chunks
  uint64_t failed_requests = 0;
  uint64_t chunks_fetched = 0;
  uint64_t cache_errors = 0;     // chunks not stored (disk full), publications that failed
  uint64_t in_flight = 0;        // chunks being downloaded now
  uint64_t queued_demand = 0;    // chunks a reader waits for, not started yet
  uint64_t queued_prefetch = 0;  // read-ahead chunks not started yet
  std::vector<ViewStatus> views;  // every view, planned or not

  // The name metrics label it with: the first path in the mount, else its key.
  std::string Label() const { return names.empty() ? key : names.front(); }
};

// An S3 source (--source s3://...): what its last listing found and when.
struct S3SourceStatus {
  std::string uri;
  uint64_t models = 0;
  std::optional<int64_t> listed_at_ns;  // since the epoch; none: never listed
  bool refreshing = false;              // a listing is being made now
  std::optional<std::string> error;     // why the last listing failed
};

// What identifies the daemon; the rest comes from the catalog.
struct MountFacts {
  std::string mountpoint;
  int64_t pid = 0;
  int64_t started_at_ns = 0;  // since the epoch
};

struct MountStatus {
  std::string version;
  MountFacts facts;
  double uptime_seconds = 0;
  std::optional<std::string> hf_cache;
  std::optional<std::string> cache_dir;         // with --repo models only
  std::optional<uint64_t> cache_size_limit;     // bytes; none when unlimited
  std::optional<unsigned> fetch_workers;        // with --repo models only
  std::optional<uint64_t> queued_demand_tasks;  // download tasks of every model, waiting
  std::optional<uint64_t> queued_prefetch_tasks;
  // Memory of downloaded chunks (ChunkMemory): its limit, in use (downloads, chunks being
  // stored, chunks kept for readers), of that kept for readers.
  std::optional<uint64_t> memory_limit, memory_used, memory_kept;
  std::vector<ModelStatus> models;
  std::vector<S3SourceStatus> s3_sources;
};

// Every model of the catalog (built or not), without building any.
MountStatus CollectStatus(Catalog& catalog, const MountFacts& facts);
// One model; `names` are its paths in the mount; `counters` its views' (the .apr's first).
ModelStatus CollectModelStatus(const ModelRef& ref, const BuiltModel* built,
                               const ViewCounters* counters, bool building,
                               std::vector<std::string> names);

}  // namespace aprfs
