#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fetch/chunk_cache.h"
#include "fetch/fetcher.h"
#include "fetch/hub_client.h"
#include "fetch/local_model.h"
#include "fetch/remote_file.h"
#include "fetch/sha256.h"

namespace aprfs {

// `--repo ORG/NAME[@REVISION]`.
struct RemoteRepoSpec {
  std::string repo_id;
  std::string revision = "main";
};
// Parses and validates a spec (repo id rules of hf-hub.md §1.2); nullopt when malformed.
std::optional<RemoteRepoSpec> ParseRepoSpec(const std::string& text);

// What every remote model of a daemon shares: the Hub client, the download workers, the chunk
// cache, the metadata cache (what a plan needs, so a model mounts again offline), and the HF
// cache complete shards are published into.
struct RemoteSettings {
  std::string cache_dir;                 // chunks/ and meta/ live here
  uint64_t cache_limit = 0;              // bytes of chunks; 0 = no limit
  unsigned connections = 8;
  uint64_t memory_limit = ChunkMemory::DefaultLimit();  // bytes of chunks in memory (ChunkMemory)
  std::optional<std::string> hf_cache;   // read complete shards from / publish them to
  RemoteOptions options;
  // Verify (and publish) a shard in the background as soon as its last chunk arrives. Off for
  // `aprfs prefetch`, which verifies in the foreground with progress.
  bool verify_when_complete = true;
};

class RemoteContext {
 public:
  // `chunks`: the chunk cache to share (the daemon's, also holding computed chunks); null:
  // one of its own in <cache_dir>/chunks.
  RemoteContext(HubConfig hub, RemoteSettings settings, ChunkCache* chunks = nullptr);
  HubClient& hub() { return hub_; }
  ChunkCache& chunks() { return *chunks_; }
  Fetcher& fetcher() { return fetcher_; }
  const RemoteSettings& settings() const { return settings_; }

 private:
  RemoteSettings settings_;
  HubClient hub_;
  std::unique_ptr<ChunkCache> own_chunks_;
  ChunkCache* chunks_;
  Fetcher fetcher_;  // last: its workers stop before the cache and the client go away
};

// Builds the model of a Hub repo at a revision: resolves the revision to a commit (or, when
// the Hub cannot be reached, uses the metadata cached by an earlier mount), reads the small JSON
// files and the shards' headers (a few KB each, by range requests; cached), and gives one source
// per shard: the HF cache blob when that shard is complete locally, else a RemoteFile. Throws
// HubError or FormatError with a clear message.
LoadedModel LoadRemoteModel(RemoteContext& context, const RemoteRepoSpec& spec);

// The 8-byte length and JSON header of a remote safetensors file of `file_size` bytes, in one
// range read of 64 KiB, or two when the header is longer. Throws FormatError (naming `where`) for
// a header length the file cannot have; what `read_range` throws.
std::string SafetensorsHeaderByRanges(
    uint64_t file_size, const std::string& where,
    const std::function<std::string(uint64_t begin, uint64_t length)>& read_range);

struct VerifyResult {
  enum class Verdict { Good, Mismatch, Error, Cancelled };
  Verdict verdict;
  std::string message;
};
// Checks a complete remote shard's sha256 against the Hub's; a mismatch drops every chunk (they
// are fetched again), a match publishes the shard into the HF cache (when there is one) under
// the commit and, when given, the branch's ref.
VerifyResult VerifyAndPublish(RemoteContext& context, RemoteFile& file,
                              const std::optional<std::string>& branch,
                              const HashCallbacks& callbacks = {});

}  // namespace aprfs
