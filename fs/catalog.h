#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "fetch/remote_model.h"
#include "fetch/s3/s3_model.h"
#include "format/views/view_kind.h"
#include "fs/read_counters.h"
#include "fs/views/chunk_writer.h"
#include "fs/views/model_views.h"
#include "fs/virtual_file.h"

namespace aprfs {

// Where models come from.
struct CatalogOptions {
  std::optional<std::string> hf_cache;  // nullopt: no HF cache
  std::vector<std::string> sources;     // --source folders
  std::vector<RemoteRepoSpec> repos;    // --repo: models read from the Hub
  HubConfig hub;                        // how to reach it
  std::vector<S3Uri> s3_sources;        // --source s3://BUCKET/PREFIX: models in a bucket
  std::optional<S3Config> s3;           // how to reach them (set when there are any)
  // How long a bucket's listing stays fresh (listing a bucket is a request, not a readdir); then
  // it is listed again in the background. 0: listed once.
  std::chrono::milliseconds s3_rescan_interval{60000};
  // Listings made just before (by `aprfs mount`, to report errors to its caller), by source URI:
  // the first scan uses them instead of listing again.
  std::map<std::string, SourceListing> s3_listed;
  RemoteSettings remote;                // caches and connections of remote (Hub, S3) models
  // How long a scan of the sources stays fresh before a lookup or a listing rescans them.
  std::chrono::milliseconds rescan_interval{1000};
  // The views a folder listing shows (every view resolves on lookup whatever this says).
  std::vector<ViewKind> listed_views = {ViewKind::kApr, ViewKind::kQ4k};
  // Where computed chunks (<dir>/chunks, beside the remote ones, under the same size limit)
  // and single-file value checks (<dir>/views) are kept; nullopt: nothing computed is stored,
  // every computed byte is recomputed on demand.
  std::optional<std::string> computed_cache_dir;
  uint64_t cache_limit = 0;  // bytes of chunks; 0 = no limit
};

// One model the sources offer, before its plan is built.
struct ModelRef {
  std::string key;                  // unique: "hf:microsoft/phi-4" or "dir:/abs/path"
  std::string name;                 // "phi-4"
  // The folder it is shown in besides the top level: the org of a hub repo ("microsoft"); for
  // a --source model its parent folder's name, used only when it loses the short name.
  std::optional<std::string> group;
  std::string dir;                  // folder holding the shards (snapshot or --source)
  std::optional<std::string> source_uri;
  std::string problem;              // non-empty when the repo cannot even be tried
  bool from_source_option = false;  // an explicit --source wins a short name
  std::optional<RemoteRepoSpec> remote;  // a --repo: built from the Hub (and local copies)
  std::optional<S3ModelRef> s3;          // a folder of an S3 source, as listed
};

// A model whose plan was built, or the reason it was rejected.
struct BuiltModel {
  ModelRef ref;
  std::shared_ptr<VirtualFile> file;  // the .apr; null when rejected
  std::shared_ptr<ModelViews> views;  // every file of the model, the .apr included
  std::string error;
  // The .apr's inode; view v is file_id + ViewIndex(v). Changes whenever the model's files do.
  uint64_t file_id = 0;
  int64_t mtime_ns = 0;               // newest mtime of the shards
  size_t shard_count = 0;
  std::vector<std::string> shard_files;  // relative to the model, in the order of file->sources()
  std::shared_ptr<ReadCounters> counters;  // the .apr's, shared by all the model's builds
  ViewCounters view_counters;              // each view's (view_counters[0] == counters)
};

// The models the sources hold, under the names of design.md ("phi-4.apr" and
// "microsoft/phi-4.apr"; short names shared by two repos are only shown under their org).
// Plans are built on first use and rebuilt when a model's files change.
class Catalog {
 public:
  explicit Catalog(CatalogOptions options);
  ~Catalog();  // waits for a listing refresh that is running

  // File names at the top level ("phi-4.apr") and folders ("microsoft") -> model keys.
  struct Listing {
    std::map<std::string, std::string> top_files;
    std::map<std::string, std::map<std::string, std::string>> org_files;
    std::vector<std::string> warnings;  // models left without a name, and why
  };
  // The current listing, rescanning the sources if the last scan is older than the interval.
  std::shared_ptr<const Listing> Scan(bool force = false);

  // The model behind `key`, built (or rebuilt after a change) on demand.
  std::shared_ptr<const BuiltModel> Get(const std::string& key);

  // Every model with its state, for `aprfs ls`. Builds every plan.
  std::vector<std::shared_ptr<const BuiltModel>> All();

  // Every model the sources offer as status pages show it: its latest build (null when never
  // looked up) and its counters. Never builds a plan nor waits for a build.
  struct ModelView {
    ModelRef ref;
    std::shared_ptr<const BuiltModel> built;
    ViewCounters counters;  // each view's, the .apr's first
    bool building = false;  // a build is running now
  };
  std::vector<ModelView> Models();

  // Each S3 source as status pages show it: what its last listing found and when, whether a
  // refresh runs now, and why the last one failed (empty when it did not).
  struct S3SourceView {
    std::string uri;
    size_t models = 0;
    int64_t listed_at_ns = 0;  // since the epoch; 0: never listed
    bool refreshing = false;
    std::string error;
  };
  std::vector<S3SourceView> S3Sources();

  const CatalogOptions& options() const { return options_; }
  // The download workers and caches of remote (--repo, S3) models; null without any.
  RemoteContext* remote() const { return remote_.get(); }
  // The chunk cache (remote and computed chunks); null when nothing is cached.
  ChunkCache* chunk_cache() const { return chunk_cache_.get(); }

 private:
  struct Slot {
    ModelRef ref;
    std::mutex build_mu;
    std::shared_ptr<const BuiltModel> built;
    std::string built_fingerprint;
    std::vector<std::string> files;  // what the last build read, relative to ref.dir
    ViewCounters counters = [] {
      ViewCounters counters;
      for (auto& view : counters) view = std::make_shared<ReadCounters>();
      return counters;
    }();
    // A copy of `built` for Models(), which must not wait for a build holding build_mu.
    std::mutex view_mu;
    std::shared_ptr<const BuiltModel> view;
    bool building = false;
  };
  // What decides whether a slot's model must be rebuilt. Requires the slot's build_mu.
  std::string Fingerprint(const Slot& slot) const;

  std::vector<ModelRef> Discover();  // requires mu_
  // The models of an S3 source as last listed. The first listing is made here; a listing older
  // than the interval is made again in the background, so that no lookup waits for the store.
  // Requires mu_.
  std::vector<ModelRef> FromS3Source(const S3Uri& source);
  // The model folders under `source`, listed now, or as an earlier mount kept them when the
  // store does not answer; nullopt when neither can be had (the caller keeps what it listed
  // before). Logged; `error` says why the store's listing could not be had.
  std::optional<std::vector<S3ModelRef>> ListS3Models(const S3Uri& source,
                                                      std::string* error) const;
  // Lists the stale sources again on a thread of its own, then installs their listings and makes
  // the next scan see them. Requires mu_.
  void RefreshS3ListingsInBackground();
  // Whether a refresh runs (one thread for the sources it took). Requires mu_.
  bool S3RefreshRunning() const;
  std::shared_ptr<const BuiltModel> Build(const ModelRef& ref, uint64_t file_id,
                                          std::vector<std::string>& files,
                                          const ViewCounters& counters) const;

  const CatalogOptions options_;
  std::unique_ptr<ChunkCache> chunk_cache_;  // when computed_cache_dir is set
  std::unique_ptr<ComputedChunkWriter> chunk_writer_;  // stops before the cache goes
  std::unique_ptr<VerdictBook> verdicts_;
  std::unique_ptr<S3Client> s3_client_;    // only with S3 sources; outlives the workers below
  std::unique_ptr<RemoteContext> remote_;  // download workers: only with remote models
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_scan_{};
  std::shared_ptr<const Listing> listing_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;
  struct S3Listing {
    std::chrono::steady_clock::time_point at;  // last asked for (listed or failed)
    std::vector<S3ModelRef> models;
    int64_t listed_at_ns = 0;  // when `models` were listed, since the epoch; 0: never
    bool refreshing = false;
    std::string error;  // why the last listing failed; empty when it did not
  };
  std::map<std::string, S3Listing> s3_listings_;  // by source URI
  std::thread s3_refresher_;    // the last refresh; joined before the catalog goes
  uint64_t next_file_id_ = 2;  // 1 is the root in the FUSE namespace
};

// A fingerprint of the files a model is built from (names, sizes, mtimes, inodes): the
// folder's *.safetensors and *.json files plus `files` (paths relative to `dir`, e.g. shards
// in a subfolder). When it changes, the plan is rebuilt.
std::string FolderFingerprint(const std::string& dir, const std::vector<std::string>& files = {});

// Which path shows which model (design.md "Names in the mount"): the short name when one
// model claims it (else an explicit --source, else a hub repo without an org), the org folder
// for hub repos, the parent folder's name for a --source model that lost its short name.
// Models with a problem claim nothing.
Catalog::Listing AssignNames(const std::vector<ModelRef>& refs);

}  // namespace aprfs
