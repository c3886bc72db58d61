#include "fs/status_snapshot.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>

#include "fetch/hf_cache.h"
#include "fetch/local_file.h"
#include "fetch/remote_file.h"

#ifndef APRFS_VERSION
#define APRFS_VERSION "unknown"
#endif

namespace aprfs {
namespace {

namespace fs = std::filesystem;

bool IsHex(const std::string& text, size_t length) {
  return text.size() == length && std::all_of(text.begin(), text.end(), [](unsigned char c) {
           return std::isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

// The commit of an HF cache path ".../snapshots/<commit>/..." (or ".../snapshots/<commit>").
std::optional<std::string> CommitInPath(const std::string& path) {
  size_t at = path.rfind("/snapshots/");
  if (at == std::string::npos) return std::nullopt;
  std::string rest = path.substr(at + 11);
  std::string commit = rest.substr(0, rest.find('/'));
  if (!IsHex(commit, 40)) return std::nullopt;
  return commit;
}

std::string KindOf(const ModelRef& ref) {
  if (ref.remote) return "remote";
  if (ref.s3) return "s3";
  return ref.key.rfind("hf:", 0) == 0 ? "hf-cache" : "local";
}

// Adds the figures of one shard source to its model's.
void CollectShard(const std::string& file, ByteSource& source, ModelStatus& model) {
  ShardStatus shard;
  shard.file = file;
  shard.size = source.size();
  if (auto* local = dynamic_cast<LocalFile*>(&source)) {
    shard.local_path = local->name();
    // Through the descriptor: the file the daemon really reads, even if the snapshot symlink
    // was replaced since.
    shard.sha256 = HfBlobSha256("/proc/self/fd/" + std::to_string(local->fd()));
    shard.cached_bytes = shard.size;
    if (!model.revision) model.revision = CommitInPath(local->name());
  } else if (auto* remote = dynamic_cast<RemoteFile*>(&source)) {
    const RemoteBlob& blob = remote->blob();
    if (!blob.sha256.empty()) shard.sha256 = blob.sha256;
    shard.cached_bytes = remote->store().PresentBytes();
    shard.published = remote->store().Published();
    if (std::string error = remote->LastCacheError(); !error.empty()) shard.cache_error = error;
    if (!model.revision) model.revision = blob.revision;
    const RemoteStats& stats = remote->stats();
    model.bytes_fetched += stats.bytes_fetched.load();
    model.requests += stats.requests.load();
    model.failed_requests += stats.failed_requests.load();
    model.chunks_fetched += stats.chunks_fetched.load();
    model.cache_errors += stats.cache_errors.load();
    RemoteFile::Activity activity = remote->CurrentActivity();
    model.in_flight += activity.in_flight;
    model.queued_demand += activity.queued_demand;
    model.queued_prefetch += activity.queued_prefetch;
  }
  model.cached_bytes += shard.cached_bytes;
  model.shards.push_back(std::move(shard));
}

}  // namespace

namespace {

ViewStatus CollectView(const ModelRef& ref, const BuiltModel* built, ViewKind view,
                       const ReadCounters* counters) {
  ViewStatus status;
  status.view = ViewName(view);
  status.file = ViewFileName(ref.name, view);
  if (counters) {
    status.bytes_read = counters->bytes_read.load();
    status.reads = counters->reads.load();
    status.errors = counters->errors.load();
    status.bytes_computed = counters->bytes_computed.load();
    status.source_bytes_encoded = counters->source_bytes_encoded.load();
    status.encode_ns = counters->encode_ns.load();
    status.cache_hits = counters->cache_hits.load();
    status.cache_misses = counters->cache_misses.load();
    status.cache_stored_bytes = counters->cache_stored_bytes.load();
    status.cache_pending_bytes = counters->cache_pending_bytes.load();
  }
  status.state = "not-planned";
  if (!built || !built->views) return status;
  status.error = built->views->Error(view);
  std::shared_ptr<VirtualFile> file = built->views->Planned(view);
  if (!status.error.empty()) {
    status.state = "refused";
  } else if (file) {
    status.state = built->views->Unchecked(view) ? "unchecked" : "ready";
  }
  if (file) {
    status.size = file->size();
    if (file->store()) status.cached_bytes = file->store()->PresentBytes();
  }
  return status;
}

}  // namespace

ModelStatus CollectModelStatus(const ModelRef& ref, const BuiltModel* built,
                               const ViewCounters* view_counters, bool building,
                               std::vector<std::string> names) {
  const ReadCounters* counters = view_counters ? (*view_counters)[0].get() : nullptr;
  ModelStatus model;
  model.names = std::move(names);
  model.key = ref.key;
  model.kind = KindOf(ref);
  model.source = ref.source_uri.value_or("file://" + ref.dir);
  if (ref.remote) {
    model.requested_revision = ref.remote->revision;
  } else if (model.kind == "hf-cache") {
    model.revision = CommitInPath(ref.dir);
  }
  if (counters) {
    model.bytes_read = counters->bytes_read.load();
    model.reads = counters->reads.load();
    model.errors = counters->errors.load();
  }
  if (!built) {
    model.state = building ? "building" : "not-yet-looked-up";
    return model;
  }
  if (!built->file) {
    model.state = "error";
    model.error = built->error;
    return model;
  }
  model.state = "ready";
  for (ViewKind view : kAllViews) {
    model.views.push_back(CollectView(ref, built, view, view_counters ? (*view_counters)[ViewIndex(view)].get() : nullptr));
  }
  const VirtualFile& file = *built->file;
  model.size = file.size();
  model.tensors = file.plan().tensor_count;
  for (size_t i = 0; i < file.sources().size(); ++i) {
    const std::string& shard_file =
        i < built->shard_files.size() ? built->shard_files[i] : file.sources()[i]->name();
    CollectShard(shard_file, *file.sources()[i], model);
  }
  return model;
}

MountStatus CollectStatus(Catalog& catalog, const MountFacts& facts) {
  MountStatus status;
  status.version = APRFS_VERSION;
  status.facts = facts;
  int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  status.uptime_seconds = static_cast<double>(now_ns - facts.started_at_ns) / 1e9;

  const CatalogOptions& options = catalog.options();
  status.hf_cache = options.hf_cache;
  if (RemoteContext* remote = catalog.remote()) {
    status.cache_dir = remote->settings().cache_dir;
    if (remote->settings().cache_limit > 0)
      status.cache_size_limit = remote->settings().cache_limit;
    status.fetch_workers = remote->fetcher().workers();
    status.queued_demand_tasks = remote->fetcher().Queued(Fetcher::Priority::Demand);
    status.queued_prefetch_tasks = remote->fetcher().Queued(Fetcher::Priority::Prefetch);
    ChunkMemory& memory = remote->chunks().memory();
    status.memory_limit = memory.limit();
    status.memory_used = memory.used();
    status.memory_kept = memory.kept();
  }

  for (const Catalog::S3SourceView& source : catalog.S3Sources()) {
    S3SourceStatus out;
    out.uri = source.uri;
    out.models = source.models;
    if (source.listed_at_ns != 0) out.listed_at_ns = source.listed_at_ns;
    out.refreshing = source.refreshing;
    if (!source.error.empty()) out.error = source.error;
    status.s3_sources.push_back(std::move(out));
  }

  std::vector<Catalog::ModelView> views = catalog.Models();
  std::shared_ptr<const Catalog::Listing> listing = catalog.Scan();
  std::map<std::string, std::vector<std::string>> names;
  for (const auto& [name, key] : listing->top_files) names[key].push_back(name);
  for (const auto& [org, files] : listing->org_files) {
    for (const auto& [name, key] : files) names[key].push_back(org + "/" + name);
  }
  for (const Catalog::ModelView& view : views) {
    status.models.push_back(CollectModelStatus(view.ref, view.built.get(), &view.counters,
                                               view.building, names[view.ref.key]));
  }
  return status;
}

}  // namespace aprfs
