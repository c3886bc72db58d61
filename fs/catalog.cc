#include "fs/catalog.h"

#include <spdlog/spdlog.h>
#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "fetch/hf_cache.h"
#include "fetch/local_file.h"
#include "fetch/local_model.h"
#include "format/views/model_import.h"
#include "fs/views/view_cache.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;

int64_t WallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool Relevant(const std::string& name) {
  auto ends = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".safetensors") || ends(".json");
}

// A Hub repo's key, names and source, whether it comes from the HF cache or --repo: one model.
ModelRef RefOfRepo(const std::string& repo_id) {
  ModelRef ref;
  ref.key = "hf:" + repo_id;
  size_t slash = repo_id.find('/');
  if (slash == std::string::npos) {
    ref.name = repo_id;
  } else {
    ref.group = repo_id.substr(0, slash);
    ref.name = repo_id.substr(slash + 1);
  }
  ref.source_uri = "hf://" + repo_id;
  return ref;
}

std::vector<ModelRef> FromHfCache(const std::string& cache_dir) {
  std::vector<ModelRef> refs;
  for (const CachedRepo& repo : ListCachedModels(cache_dir)) {
    if (repo.problem.empty() && !FolderHasSafetensors(repo.snapshot_dir)) continue;
    ModelRef ref = RefOfRepo(repo.repo_id);
    ref.dir = repo.snapshot_dir;
    ref.problem = repo.problem;
    refs.push_back(std::move(ref));
  }
  return refs;
}

ModelRef FromFolder(const fs::path& dir) {
  ModelRef ref;
  ref.key = "dir:" + dir.string();
  ref.name = dir.filename().string();
  std::string parent = dir.parent_path().filename().string();
  if (!parent.empty() && parent != "/") ref.group = parent;
  ref.dir = dir.string();
  ref.source_uri = "file://" + dir.string();
  ref.from_source_option = true;
  return ref;
}

std::vector<ModelRef> FromSourceOption(const std::string& option) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(option, ec), ec);
  if (!fs::is_directory(dir, ec)) {
    spdlog::warn("--source {}: not a folder", option);
    return {};
  }
  if (FolderHasSafetensors(dir.string())) return {FromFolder(dir)};
  std::vector<ModelRef> refs;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory(ec)) continue;
    if (FolderHasSafetensors(entry.path().string())) refs.push_back(FromFolder(entry.path()));
  }
  std::sort(refs.begin(), refs.end(),
            [](const ModelRef& a, const ModelRef& b) { return a.key < b.key; });
  return refs;
}

int64_t NewestMtime(const VirtualFile& file) {
  int64_t newest = 0;
  for (const auto& source : file.sources()) {
    if (auto* local = dynamic_cast<const LocalFile*>(source.get())) {
      newest = std::max(newest, local->file_identity().mtime_ns);
    }
  }
  return newest;
}

}  // namespace

std::string FolderFingerprint(const std::string& dir, const std::vector<std::string>& files) {
  std::set<std::string> names(files.begin(), files.end());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (Relevant(name)) names.insert(name);
  }
  std::string fingerprint;
  for (const std::string& name : names) {
    struct stat st;
    if (::stat((dir + "/" + name).c_str(), &st) != 0) continue;  // follows snapshot symlinks
    FileIdentity id = IdentityOf(st);
    fingerprint += name + ":" + std::to_string(id.inode) + ":" + std::to_string(id.size) + ":" +
                   std::to_string(id.mtime_ns) + "\n";
  }
  return fingerprint;
}

Catalog::Listing AssignNames(const std::vector<ModelRef>& refs) {
  Catalog::Listing listing;
  std::map<std::string, std::vector<const ModelRef*>> by_name;
  for (const ModelRef& ref : refs) {
    if (ref.problem.empty()) by_name[ref.name].push_back(&ref);
  }
  auto place = [&](const std::string& group, const std::string& file, const ModelRef& ref) {
    auto [it, inserted] = listing.org_files[group].emplace(file, ref.key);
    if (!inserted && it->second != ref.key) {
      listing.warnings.push_back(ref.key + ": not shown: " + group + "/" + file +
                                 " already shows " + it->second);
    }
  };
  // Hub orgs first: their paths are the stable ones.
  for (const auto& [name, claimants] : by_name) {
    for (const ModelRef* ref : claimants) {
      if (ref->group && !ref->from_source_option) place(*ref->group, name + ".apr", *ref);
    }
  }
  for (const auto& [name, claimants] : by_name) {
    const ModelRef* winner = claimants.size() == 1 ? claimants[0] : nullptr;
    for (const ModelRef* ref : claimants) {
      if (!winner && ref->from_source_option) winner = ref;
    }
    for (const ModelRef* ref : claimants) {
      if (!winner && !ref->group) winner = ref;
    }
    if (winner) listing.top_files[name + ".apr"] = winner->key;
    for (const ModelRef* ref : claimants) {
      if (ref == winner || (ref->group && !ref->from_source_option)) continue;
      if (ref->from_source_option && ref->group) {
        place(*ref->group, name + ".apr", *ref);
      } else {
        listing.warnings.push_back(ref->key + ": not shown: " + name + ".apr already shows " +
                                   (winner ? winner->key : "another model"));
      }
    }
  }
  return listing;
}

Catalog::Catalog(CatalogOptions options) : options_(std::move(options)) {
  if (options_.computed_cache_dir) {
    chunk_cache_ = std::make_unique<ChunkCache>(*options_.computed_cache_dir + "/chunks",
                                                options_.cache_limit, options_.remote.memory_limit);
    chunk_writer_ = std::make_unique<ComputedChunkWriter>(chunk_cache_.get());
    verdicts_ = std::make_unique<VerdictBook>(*options_.computed_cache_dir + "/views");
  } else {
    verdicts_ = std::make_unique<VerdictBook>();
  }
  if (!options_.s3_sources.empty()) {
    s3_client_ = std::make_unique<S3Client>(options_.s3.value_or(S3Config{}));
    const auto now = std::chrono::steady_clock::now();
    for (const S3Uri& source : options_.s3_sources) {
      auto listed = options_.s3_listed.find(source.ToString());
      if (listed == options_.s3_listed.end()) continue;
      const SourceListing& made = listed->second;
      s3_listings_[source.ToString()] = S3Listing{now, FindS3Models(source, made.objects),
                                                  made.stale.empty() ? WallClockNs() : 0, false,
                                                  made.stale};
    }
  }
  if (!options_.repos.empty() || !options_.s3_sources.empty()) {
    remote_ = std::make_unique<RemoteContext>(options_.hub, options_.remote, chunk_cache_.get());
  }
}

namespace {

ModelRef FromRepoOption(const RemoteRepoSpec& spec) {
  ModelRef ref = RefOfRepo(spec.repo_id);
  ref.remote = spec;
  return ref;
}

}  // namespace

Catalog::~Catalog() {
  if (s3_refresher_.joinable()) s3_refresher_.join();
}

std::optional<std::vector<S3ModelRef>> Catalog::ListS3Models(const S3Uri& source,
                                                             std::string* error) const {
  const std::string uri = source.ToString();
  try {
    SourceListing listing = ListS3Source(*s3_client_, source, options_.remote.cache_dir);
    *error = listing.stale;
    std::vector<S3ModelRef> models = FindS3Models(source, listing.objects);
    if (models.empty()) spdlog::warn("{}: no model folders (no *.safetensors)", uri);
    return models;
  } catch (const std::exception& e) {
    // The models listed before stay; asked again at the next interval.
    spdlog::error("{}: cannot list: {}", uri, e.what());
    *error = e.what();
    return std::nullopt;
  }
}

void Catalog::RefreshS3ListingsInBackground() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<S3Uri> due;
  for (const S3Uri& source : options_.s3_sources) {
    auto it = s3_listings_.find(source.ToString());
    if (it == s3_listings_.end() || now - it->second.at < options_.s3_rescan_interval) continue;
    it->second.at = now;  // not due again before the interval, whatever the outcome
    it->second.refreshing = true;
    due.push_back(source);
  }
  if (due.empty()) return;
  // The last refresh is over (its sources' `refreshing` were cleared in its last step): joined
  // at once.
  if (s3_refresher_.joinable()) s3_refresher_.join();
  s3_refresher_ = std::thread([this, due = std::move(due)] {
    std::map<std::string, std::optional<std::vector<S3ModelRef>>> listed;
    std::map<std::string, std::string> errors;
    for (const S3Uri& source : due) {
      listed[source.ToString()] = ListS3Models(source, &errors[source.ToString()]);
    }
    std::lock_guard lock(mu_);
    bool changed = false;
    for (auto& [uri, models] : listed) {
      S3Listing& listing = s3_listings_[uri];
      listing.refreshing = false;
      listing.error = errors[uri];
      if (!models) continue;  // what was listed before stays
      listing.at = std::chrono::steady_clock::now();
      listing.models = std::move(*models);
      if (listing.error.empty()) listing.listed_at_ns = WallClockNs();
      changed = true;
    }
    if (changed) last_scan_ = {};  // the next lookup or listing sees them
  });
}

bool Catalog::S3RefreshRunning() const {
  return std::any_of(s3_listings_.begin(), s3_listings_.end(),
                     [](const auto& entry) { return entry.second.refreshing; });
}

std::vector<Catalog::S3SourceView> Catalog::S3Sources() {
  std::lock_guard lock(mu_);
  std::vector<S3SourceView> views;
  for (const S3Uri& source : options_.s3_sources) {
    S3SourceView view;
    view.uri = source.ToString();
    if (auto it = s3_listings_.find(view.uri); it != s3_listings_.end()) {
      view.models = it->second.models.size();
      view.listed_at_ns = it->second.listed_at_ns;
      view.refreshing = it->second.refreshing;
      view.error = it->second.error;
    }
    views.push_back(std::move(view));
  }
  return views;
}

std::vector<ModelRef> Catalog::FromS3Source(const S3Uri& source) {
  const std::string uri = source.ToString();
  auto it = s3_listings_.find(uri);
  if (it == s3_listings_.end()) {
    // The first listing (none was handed over by `aprfs mount`): nothing to show meanwhile.
    const auto now = std::chrono::steady_clock::now();
    std::string error;
    std::optional<std::vector<S3ModelRef>> models = ListS3Models(source, &error);
    S3Listing listing{now, models.value_or(std::vector<S3ModelRef>{}),
                      models && error.empty() ? WallClockNs() : 0, false, error};
    it = s3_listings_.emplace(uri, std::move(listing)).first;
  } else if (options_.s3_rescan_interval.count() > 0 && !S3RefreshRunning() &&
             std::chrono::steady_clock::now() - it->second.at >= options_.s3_rescan_interval) {
    RefreshS3ListingsInBackground();
  }
  std::vector<ModelRef> refs;
  for (const S3ModelRef& model : it->second.models) {
    ModelRef ref;
    ref.key = "s3:" + model.folder.ToString();
    ref.name = model.Name();
    ref.group = model.Group();
    ref.dir = model.folder.ToString();
    ref.source_uri = model.folder.ToString();
    ref.from_source_option = true;
    ref.s3 = model;
    refs.push_back(std::move(ref));
  }
  return refs;
}

std::vector<ModelRef> Catalog::Discover() {
  std::vector<ModelRef> refs;
  // A --repo that is also in the local HF cache is one model: the --repo entry comes first and
  // the cache's entry of the same key is dropped (its complete shards are still read locally).
  std::set<std::string> repo_ids;
  for (const RemoteRepoSpec& spec : options_.repos) {
    ModelRef ref = FromRepoOption(spec);
    // The same repo at a second revision: shown as NAME@REV.apr beside NAME.apr.
    if (!repo_ids.insert(spec.repo_id).second) {
      std::string suffix = "@" + spec.revision;
      std::replace(suffix.begin(), suffix.end(), '/', '_');
      ref.key += suffix;
      ref.name += suffix;
    }
    refs.push_back(std::move(ref));
  }
  for (const std::string& source : options_.sources) {
    for (ModelRef& ref : FromSourceOption(source)) refs.push_back(std::move(ref));
  }
  for (const S3Uri& source : options_.s3_sources) {
    for (ModelRef& ref : FromS3Source(source)) refs.push_back(std::move(ref));
  }
  if (options_.hf_cache) {
    for (ModelRef& ref : FromHfCache(*options_.hf_cache)) refs.push_back(std::move(ref));
  }
  std::set<std::string> keys;
  std::erase_if(refs, [&](const ModelRef& ref) { return !keys.insert(ref.key).second; });
  return refs;
}

std::shared_ptr<const Catalog::Listing> Catalog::Scan(bool force) {
  std::lock_guard lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (listing_ && !force && now - last_scan_ < options_.rescan_interval) return listing_;
  last_scan_ = now;

  std::vector<ModelRef> refs = Discover();
  std::map<std::string, std::shared_ptr<Slot>> slots;
  for (const ModelRef& ref : refs) {
    if (slots.count(ref.key)) continue;  // the same folder named twice
    // A slot lives as long as its key names the same folder and problem; its `ref` is
    // never written after creation, so builders may read it without this lock.
    auto old = slots_.find(ref.key);
    std::shared_ptr<Slot> slot;
    // An S3 model whose objects changed in the bucket is another model: a new slot.
    auto listed = [](const ModelRef& r) { return r.s3 ? r.s3->Fingerprint() : ""; };
    if (old != slots_.end() && old->second->ref.dir == ref.dir &&
        old->second->ref.problem == ref.problem && listed(old->second->ref) == listed(ref)) {
      slot = old->second;
    } else {
      slot = std::make_shared<Slot>();
      slot->ref = ref;
    }
    slots[ref.key] = slot;
  }
  auto listing = std::make_shared<Listing>(AssignNames(refs));
  if (!listing_ || listing->warnings != listing_->warnings) {
    for (const std::string& warning : listing->warnings) spdlog::warn("{}", warning);
  }
  slots_ = std::move(slots);
  listing_ = listing;
  return listing_;
}

std::shared_ptr<const BuiltModel> Catalog::Build(const ModelRef& ref, uint64_t file_id,
                                                 std::vector<std::string>& files,
                                                 const ViewCounters& counters) const {
  auto built = std::make_shared<BuiltModel>();
  built->ref = ref;
  built->file_id = file_id;
  built->counters = counters[ViewIndex(ViewKind::kApr)];
  built->view_counters = counters;
  if (!ref.problem.empty()) {
    built->error = ref.problem;
    return built;
  }
  try {
    LoadedModel loaded = ref.remote ? LoadRemoteModel(*remote_, *ref.remote)
                         : ref.s3   ? LoadS3Model(*remote_, *s3_client_, *ref.s3)
                                    : LoadLocalModel(ref.dir, ref.name, ref.source_uri, &files);
    built->shard_count = loaded.sources.size();
    for (const Shard& shard : loaded.set.shards) built->shard_files.push_back(shard.file);
    malloc_trim(0);  // the parses' text and scratch: megabytes the import below would sit on
    // The input's copies of every name are freed before the plan's buffers are written: hand
    // them back then, or they stay resident under the peak.
    ImportedModel imported = ImportShardSet(std::move(loaded.set), [] { malloc_trim(0); });
    const std::string file_name = ViewFileName(ref.name, ViewKind::kApr);
    const ComputedCache computed{chunk_cache_.get(), chunk_writer_.get()};
    ComputeSettings compute = ComputedStorage(imported.plan, loaded.sources, ViewKind::kApr,
                                              computed, file_name);
    built->file = std::make_shared<VirtualFile>(file_name, std::move(imported.plan), loaded.sources,
                                                built->counters, std::move(compute));
    built->views = std::make_shared<ModelViews>(ref.name, std::move(loaded.sources),
                                                std::move(loaded.reload),
                                                std::move(loaded.read_text), built->file,
                                                counters, computed, verdicts_.get());
    built->mtime_ns = NewestMtime(*built->file);
    if (built->mtime_ns == 0) {  // nothing local yet: the time the model was first planned
      built->mtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    }
    spdlog::info("{}: {} tensors from {} shards, {} bytes", ref.key,
                 built->file->plan().tensor_count, built->shard_count, built->file->size());
  } catch (const std::exception& e) {
    built->error = e.what();
    spdlog::warn("{}: not shown: {}", ref.key, built->error);
  }
  // Building a plan, or failing to, leaves megabytes of freed heap behind.
  malloc_trim(0);
  return built;
}

std::shared_ptr<const BuiltModel> Catalog::Get(const std::string& key) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mu_);
    auto it = slots_.find(key);
    if (it == slots_.end()) return nullptr;
    slot = it->second;
  }
  std::lock_guard build_lock(slot->build_mu);
  std::string fingerprint = Fingerprint(*slot);
  const bool stale = slot->built && slot->built->views && slot->built->views->Stale();
  if (!slot->built || fingerprint != slot->built_fingerprint || stale) {
    uint64_t file_id;
    {
      std::lock_guard lock(mu_);
      file_id = next_file_id_;
      next_file_id_ += kViewCount;  // one inode per view
    }
    std::vector<std::string> watched = slot->files;
    {
      std::lock_guard view_lock(slot->view_mu);
      slot->building = true;
    }
    slot->built = Build(slot->ref, file_id, slot->files, slot->counters);
    {
      std::lock_guard view_lock(slot->view_mu);
      slot->view = slot->built;
      slot->building = false;
    }
    // The fingerprint from before the build is the safe one: a change during the build then
    // triggers another. Only files the build just learned of (shards in subfolders) need a
    // new one.
    slot->built_fingerprint = watched == slot->files && !slot->ref.remote && !slot->ref.s3
                                  ? fingerprint
                                  : Fingerprint(*slot);
  }
  return slot->built;
}

std::string Catalog::Fingerprint(const Slot& slot) const {
  if (!slot.ref.remote && !slot.ref.s3) return FolderFingerprint(slot.ref.dir, slot.files);
  // A remote model is pinned to its commit (or its objects' ETags): built once. One that failed
  // (the Hub or the store unreachable) is tried again every 30 s.
  if (slot.built && slot.built->file) return "remote";
  auto now = std::chrono::steady_clock::now().time_since_epoch();
  return "remote-retry-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count() / 30);
}

std::vector<std::shared_ptr<const BuiltModel>> Catalog::All() {
  Scan(true);
  std::vector<std::string> keys;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, slot] : slots_) keys.push_back(key);
  }
  std::vector<std::shared_ptr<const BuiltModel>> models;
  for (const std::string& key : keys) {
    if (auto model = Get(key)) models.push_back(model);
  }
  return models;
}

std::vector<Catalog::ModelView> Catalog::Models() {
  Scan();
  std::vector<std::shared_ptr<Slot>> slots;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, slot] : slots_) slots.push_back(slot);
  }
  std::vector<ModelView> views;
  for (const auto& slot : slots) {
    std::lock_guard view_lock(slot->view_mu);
    views.push_back({slot->ref, slot->view, slot->counters, slot->building});
  }
  return views;
}

}  // namespace aprfs
