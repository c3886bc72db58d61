#include "fetch/remote_model.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "fetch/hf_cache_writer.h"
#include "fetch/hub_origin.h"
#include "fetch/model_folder.h"
#include "fetch/local_file.h"
#include "fetch/meta_cache.h"
#include "fetch/sha256.h"
#include "format/error.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxSmallFile = 256ull << 20;
constexpr uint64_t kFirstHeaderRead = 64 << 10;

bool ValidRepoPart(const std::string& part) {
  if (part.empty() || part.size() > 96) return false;
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') {
    return false;
  }
  if (part.find("--") != std::string::npos || part.find("..") != std::string::npos) return false;
  if (part.size() >= 4 && part.compare(part.size() - 4, 4, ".git") == 0) return false;
  return std::all_of(part.begin(), part.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-';
  });
}

// No "..", no absolute paths: revisions and repo paths become file names in the caches.
bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/' ||
      path.find('\0') != std::string::npos) {
    return false;
  }
  std::stringstream segments(path);
  std::string segment;
  while (std::getline(segments, segment, '/')) {
    if (segment.empty() || segment == "." || segment == "..") return false;
  }
  return true;
}

std::string MetaDir(RemoteContext& context, const std::string& repo_id) {
  return context.settings().cache_dir + "/meta/" + ModelRepoFolderName(repo_id);
}

std::string RevisionJson(const RepoRevision& revision) {
  json files = json::array();
  for (const RepoFile& file : revision.files) {
    json item = {{"path", file.path}, {"size", file.size}, {"blob_id", file.blob_id}};
    if (file.sha256) item["sha256"] = *file.sha256;
    files.push_back(item);
  }
  return json{{"repo_id", revision.repo_id}, {"commit", revision.commit}, {"files", files}}.dump();
}

std::optional<RepoRevision> ParseRevisionJson(const std::string& text) {
  try {
    json info = json::parse(text);
    RepoRevision revision;
    revision.repo_id = info.at("repo_id").get<std::string>();
    revision.commit = info.at("commit").get<std::string>();
    for (const json& item : info.at("files")) {
      RepoFile file;
      file.path = item.at("path").get<std::string>();
      file.size = item.at("size").get<uint64_t>();
      file.blob_id = item.at("blob_id").get<std::string>();
      if (item.contains("sha256")) file.sha256 = item["sha256"].get<std::string>();
      revision.files.push_back(std::move(file));
    }
    if (!IsCommitHash(revision.commit)) return std::nullopt;
    return revision;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// The commit and file list: from the Hub (then cached), or from the cache when the Hub cannot
// answer (offline, unreachable, failing) as the official client falls back on its cache.
RepoRevision ResolveRevision(RemoteContext& context, const RemoteRepoSpec& spec) {
  const std::string meta = MetaDir(context, spec.repo_id);
  auto cached = [&]() -> std::optional<RepoRevision> {
    std::string commit = spec.revision;
    if (!IsCommitHash(commit)) {
      std::optional<std::string> ref = ReadFileIfExists(meta + "/refs/" + spec.revision, 100);
      if (!ref) return std::nullopt;
      commit = *ref;
    }
    std::optional<std::string> text = ReadFileIfExists(meta + "/" + commit + "/revision.json",
                                                       kMaxSmallFile);
    return text ? ParseRevisionJson(*text) : std::nullopt;
  };
  // A commit never changes: no need to ask the Hub again.
  if (IsCommitHash(spec.revision)) {
    if (auto revision = cached()) return *revision;
  }
  try {
    RepoRevision revision = context.hub().Resolve(spec.repo_id, spec.revision);
    WriteAtomically(meta + "/" + revision.commit + "/revision.json", RevisionJson(revision));
    if (!IsCommitHash(spec.revision)) WriteAtomically(meta + "/refs/" + spec.revision, revision.commit);
    return revision;
  } catch (const HubError& e) {
    if (!e.CacheMayAnswer()) throw;
    if (auto revision = cached()) {
      spdlog::warn("{}@{}: using cached metadata of commit {} ({})", spec.repo_id, spec.revision,
                   revision->commit, e.what());
      return *revision;
    }
    throw HubError(e.kind(), std::string(e.what()) + "; no metadata cached by an earlier mount");
  }
}

// A complete copy of the file in the local HF cache, at this commit, if there is one.
std::optional<std::string> LocalCopy(RemoteContext& context, const RepoRevision& revision,
                                     const RepoFile& file) {
  if (!context.settings().hf_cache) return std::nullopt;
  std::string path = *context.settings().hf_cache + "/" + ModelRepoFolderName(revision.repo_id) +
                     "/snapshots/" + revision.commit + "/" + file.path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (static_cast<uint64_t>(st.st_size) != file.size) return std::nullopt;
  return path;
}

std::string SmallFile(RemoteContext& context, const RepoRevision& revision, const RepoFile& file) {
  if (auto local = LocalCopy(context, revision, file)) {
    if (auto text = ReadFileIfExists(*local, kMaxSmallFile)) return *text;
  }
  std::string cached = MetaDir(context, revision.repo_id) + "/" + revision.commit + "/files/" + file.path;
  if (auto text = ReadFileIfExists(cached, kMaxSmallFile)) return *text;
  std::string text = context.hub().Download(revision.repo_id, revision.commit, file.path, kMaxSmallFile);
  WriteAtomically(cached, text);
  return text;
}

// Bytes [begin, begin+length) of an LFS file, by one validated range request (with retries).
std::string FetchRange(RemoteContext& context, const RepoRevision& revision, const RepoFile& file,
                       uint64_t begin, uint64_t length) {
  HubClient& hub = context.hub();
  std::string error;
  std::optional<DataUrl> url;
  for (int attempt = 0; attempt < hub.config().max_attempts; ++attempt) {
    if (!url) {
      try {
        url = hub.ResolveData(revision.repo_id, revision.commit, file.path, /*attempts=*/1);
      } catch (const HubError& e) {
        if (!e.CacheMayAnswer()) throw;
        error = e.what();
        std::this_thread::sleep_for(RetryDelay(attempt, HttpResponse{}));
        continue;
      }
    }
    HttpRequest request;
    request.url = url->url;
    request.headers = hub.Headers(url->send_token);
    request.headers.push_back("Range: bytes=" + std::to_string(begin) + "-" +
                              std::to_string(begin + length - 1));
    request.stall_timeout = hub.config().download_timeout;
    request.deadline = context.settings().options.request_deadline;
    request.max_collected_body = length;
    HttpResponse response = ThreadHttpSession().Perform(request);
    std::string expected = "bytes " + std::to_string(begin) + "-" +
                           std::to_string(begin + length - 1) + "/" + std::to_string(file.size);
    if (response.complete() && response.status == 206 &&
        response.Header("content-range") == expected && response.body.size() == length) {
      return std::move(response.body);
    }
    error = response.complete() && response.status == 206
                ? "bad range answer (" + response.Header("content-range") + ", " +
                      std::to_string(response.body.size()) + " bytes)"
                : response.Describe();
    if (response.status == 400 || response.status == 403 || response.status == 410) url.reset();
    if (response.status == 401 || response.status == 404 || response.status == 416) break;
    std::this_thread::sleep_for(RetryDelay(attempt, response));
  }
  throw HubError(HubError::Kind::Network, "cannot read bytes " + std::to_string(begin) + "-" +
                                              std::to_string(begin + length - 1) + " of " +
                                              file.path + ": " + error);
}

// The 8-byte length and JSON header of a remote shard: cached, else two range reads at most.
std::string ShardHeaderBytes(RemoteContext& context, const RepoRevision& revision,
                             const RepoFile& file) {
  std::string cached = MetaDir(context, revision.repo_id) + "/" + revision.commit + "/headers/" +
                       file.path + ".header";
  if (auto bytes = ReadFileIfExists(cached, kMaxSafetensorsHeaderLen + 8)) return *bytes;
  std::string bytes = SafetensorsHeaderByRanges(file.size, file.path, [&](uint64_t begin, uint64_t length) {
    return FetchRange(context, revision, file, begin, length);
  });
  WriteAtomically(cached, bytes);
  return bytes;
}

}  // namespace

std::string SafetensorsHeaderByRanges(
    uint64_t file_size, const std::string& where,
    const std::function<std::string(uint64_t begin, uint64_t length)>& read_range) {
  std::string bytes = read_range(0, std::min(kFirstHeaderRead, file_size));
  uint64_t header_len = ParseSafetensorsHeaderLength(bytes, file_size, where);
  if (bytes.size() < 8 + header_len) bytes += read_range(bytes.size(), 8 + header_len - bytes.size());
  bytes.resize(8 + header_len);
  return bytes;
}

// When a shard's last chunk arrives: verify its sha256 against the Hub's, then hand the file
// to the HF cache (where transformers and the next mount find it). A mismatch drops every chunk.
VerifyResult VerifyAndPublish(RemoteContext& context, RemoteFile& file,
                              const std::optional<std::string>& branch,
                              const HashCallbacks& callbacks) {
  const RemoteBlob& blob = file.blob();
  ChunkStore& store = file.store();
  HashCallbacks hashing = callbacks;
  hashing.cancelled = [&] {
    return context.fetcher().Stopping() || (callbacks.cancelled && callbacks.cancelled());
  };
  const std::vector<uint32_t> generations = store.Generations();
  // Its own descriptor: the hash's sequential readahead must not become the readers'.
  const std::string data_path = store.dir() + "/data";
  const int hash_fd = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (hash_fd < 0) {
    const std::string error = data_path + ": " + std::strerror(errno);
    spdlog::error("{}: cannot verify: {}", file.name(), error);
    return {VerifyResult::Verdict::Error, "cannot verify: " + error};
  }
  HashResult hash = Sha256OfRange(hash_fd, 0, blob.size, data_path, hashing);
  ::close(hash_fd);
  if (hash.cancelled) return {VerifyResult::Verdict::Cancelled, "cancelled"};  // next time
  if (!hash.ok()) {
    spdlog::error("{}: cannot verify: {}", file.name(), hash.error);
    return {VerifyResult::Verdict::Error, "cannot verify: " + hash.error};
  }
  if (hash.hex != blob.sha256 && store.Generations() != generations) {
    // A chunk was evicted (its hole read as zeros) while we read (--cache-size, a full disk):
    // the hash says nothing about the file. Not a mismatch, and no reason to drop the rest.
    const std::string message = "chunks were evicted while it was verified (is the cache "
                                "smaller than the file?); verified again once complete";
    spdlog::warn("{}: {}", file.name(), message);
    file.VerifyWhenCompleteAgain();
    return {VerifyResult::Verdict::Error, message};
  }
  if (hash.hex != blob.sha256) {
    std::string message = "sha256 " + hash.hex + " does not match the Hub's " + blob.sha256 +
                          ": all its chunks dropped";
    spdlog::error("{}: {}", file.name(), message);
    file.DropAllChunks();
    return {VerifyResult::Verdict::Mismatch, message};
  }
  spdlog::info("{}: complete and verified (sha256 {})", file.name(), hash.hex);
  if (!context.settings().hf_cache) return {VerifyResult::Verdict::Good, "verified"};
  std::unique_ptr<ChunkStore::Claim> publication = store.ClaimPublication();
  if (!publication) return {VerifyResult::Verdict::Good, "verified (already published)"};
  PublishRequest request;
  request.cache_dir = *context.settings().hf_cache;
  request.repo_id = blob.repo_id;
  request.commit = blob.revision;
  request.branch = branch;
  request.path_in_repo = blob.path;
  request.etag = blob.sha256;
  request.source_path = store.dir() + "/data";
  request.size = blob.size;
  request.move_source = true;
  PublishResult result = PublishToHfCache(request);
  if (!result.ok) {
    spdlog::warn("{}: not published to the HF cache: {}", file.name(), result.error);
    file.NoteCacheError("not published to the HF cache: " + result.error);
    store.AbandonPublication(*publication);
    return {VerifyResult::Verdict::Good, "verified, not published: " + result.error};
  }
  // The data now lives in the HF cache; this process still reads it through its descriptor.
  std::error_code ec;
  for (const char* name : {"map", "claims", "lock"}) fs::remove(store.dir() + "/" + name, ec);
  fs::remove(store.dir(), ec);
  spdlog::info("{}: published to {}", file.name(), request.cache_dir);
  return {VerifyResult::Verdict::Good, "verified, published to " + request.cache_dir};
}


std::optional<RemoteRepoSpec> ParseRepoSpec(const std::string& text) {
  RemoteRepoSpec spec;
  size_t at = text.find('@');
  spec.repo_id = text.substr(0, at);
  if (at != std::string::npos) spec.revision = text.substr(at + 1);
  if (spec.revision.empty() || !SafeRelativePath(spec.revision)) return std::nullopt;
  size_t slash = spec.repo_id.find('/');
  if (slash == std::string::npos) {
    if (!ValidRepoPart(spec.repo_id)) return std::nullopt;
  } else if (!ValidRepoPart(spec.repo_id.substr(0, slash)) ||
             !ValidRepoPart(spec.repo_id.substr(slash + 1))) {
    return std::nullopt;
  }
  return spec;
}

RemoteContext::RemoteContext(HubConfig hub, RemoteSettings settings, ChunkCache* chunks)
    : settings_(std::move(settings)),
      hub_(std::move(hub)),
      own_chunks_(chunks ? nullptr
                         : std::make_unique<ChunkCache>(settings_.cache_dir + "/chunks",
                                                        settings_.cache_limit,
                                                        settings_.memory_limit)),
      chunks_(chunks ? chunks : own_chunks_.get()),
      fetcher_(settings_.connections) {}

namespace {

// The repo's small files (index, config, tokenizer) and the names of its shards, from the
// metadata cache when an earlier load fetched them.
ShardSet ReadRepoFiles(RemoteContext& context, const RemoteRepoSpec& spec,
                       const RepoRevision& revision, std::vector<std::string>& shard_files) {
  ModelFolder folder;
  folder.where = spec.repo_id + "@" + revision.commit;
  for (const RepoFile& file : revision.files) {
    if (file.path.find('/') == std::string::npos) folder.files.insert(file.path);
  }
  folder.read = [&](const std::string& path) {
    return SmallFile(context, revision, *revision.Find(path));
  };
  folder.name_of = [](const std::string& path) { return path; };
  ShardSet set = ReadModelFolder(folder, shard_files);
  size_t slash = spec.repo_id.find('/');
  set.name = slash == std::string::npos ? spec.repo_id : spec.repo_id.substr(slash + 1);
  set.source = "hf://" + spec.repo_id;
  return set;
}

const RepoFile& ShardFile(const RepoRevision& revision, const RemoteRepoSpec& spec,
                          const std::string& path) {
  const RepoFile* file = revision.Find(path);
  if (!file) {
    throw FormatError(std::string(kWeightIndexFile) + ": shard " + Quote(path) +
                      " is not a file of " + spec.repo_id + "@" + revision.commit);
  }
  return *file;
}

// A remote shard's header: from the metadata cache (or the Hub) by range, not through its
// source, whose chunks are 8 MiB.
Shard RemoteShardHeader(RemoteContext& context, const RemoteRepoSpec& spec,
                        const RepoRevision& revision, const RepoFile& file) {
  Shard shard;
  shard.file = file.path;
  shard.size = file.size;
  std::string bytes = ShardHeaderBytes(context, revision, file);
  std::string where = "hf://" + spec.repo_id + "/" + file.path;
  shard.header = ParseSafetensorsHeader(std::string_view(bytes).substr(8), file.size, where);
  return shard;
}

}  // namespace

LoadedModel LoadRemoteModel(RemoteContext& context, const RemoteRepoSpec& spec) {
  RepoRevision revision = ResolveRevision(context, spec);
  LoadedModel model;
  std::vector<std::string> shard_files;
  ShardSet side = ReadRepoFiles(context, spec, revision, shard_files);
  model.set.name = side.name;
  model.set.source = side.source;
  model.set.index = std::move(side.index);

  std::optional<std::string> branch;
  if (!IsCommitHash(spec.revision)) branch = spec.revision;
  for (const std::string& path : shard_files) {
    const RepoFile* file = &ShardFile(revision, spec, path);
    Shard shard;
    if (auto local = LocalCopy(context, revision, *file)) {
      std::shared_ptr<LocalFile> source;
      shard = ReadLocalShard(fs::path(*local).parent_path().string(),
                             fs::path(*local).filename().string(), source);
      shard.file = path;
      model.sources.push_back(std::move(source));
    } else {
      shard = RemoteShardHeader(context, spec, revision, *file);
      const std::string sha256 = file->sha256.value_or("");
      RemoteBlob blob = HubBlob(spec.repo_id, revision.commit, path, file->size, sha256);
      auto store = context.chunks().Store(file->etag(), file->size);
      std::function<void(RemoteFile&)> on_complete = [&context, branch](RemoteFile& done) {
        std::weak_ptr<RemoteFile> weak = done.weak_from_this();
        context.fetcher().Submit(Fetcher::Lane::Verify, [&context, weak, branch] {
          if (auto file = weak.lock()) VerifyAndPublish(context, *file, branch);
        });
      };
      auto remote = std::make_shared<RemoteFile>(
          blob, std::make_unique<HubOrigin>(context.hub(), spec.repo_id, revision.commit, path, sha256),
          store, context.chunks(), context.fetcher(),
          context.settings().options,
          context.settings().verify_when_complete ? on_complete : std::function<void(RemoteFile&)>());
      // Complete but never published (a daemon stopped while verifying, or the HF cache was
      // not writable then): verify and publish it now.
      if (context.settings().verify_when_complete && context.settings().hf_cache &&
          store->Complete() && !store->Published()) {
        on_complete(*remote);
      }
      model.sources.push_back(std::move(remote));
    }
    model.set.shards.push_back(std::move(shard));
  }
  // Data is laid out in shard order: a sequential reader goes from one shard into the next.
  for (size_t i = 0; i + 1 < model.sources.size(); ++i) {
    auto current = std::dynamic_pointer_cast<RemoteFile>(model.sources[i]);
    auto next = std::dynamic_pointer_cast<RemoteFile>(model.sources[i + 1]);
    if (current && next) current->SetNext(next);
  }
  model.set.config = std::move(side.config);
  model.set.tokenizer = std::move(side.tokenizer);
  // Everything it reads is pinned by the commit and cached: a reload needs no network.
  model.read_text = [&context, revision](const std::string& path) -> std::optional<std::string> {
    const RepoFile* file = revision.Find(path);
    if (!file) return std::nullopt;
    return SmallFile(context, revision, *file);
  };
  model.reload = [&context, spec, revision, shard_files, sources = model.sources] {
    std::vector<std::string> now;
    ShardSet set = ReadRepoFiles(context, spec, revision, now);
    for (size_t i = 0; i < shard_files.size(); ++i) {
      const RepoFile& file = ShardFile(revision, spec, shard_files[i]);
      if (std::dynamic_pointer_cast<RemoteFile>(sources[i])) {
        set.shards.push_back(RemoteShardHeader(context, spec, revision, file));
      } else {
        set.shards.push_back(ReadShardHeader(*sources[i], shard_files[i]));
      }
    }
    return set;
  };
  return model;
}

}  // namespace aprfs
