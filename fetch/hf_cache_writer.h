#pragma once

// Publishes one complete, verified file into the standard Hugging Face cache so that
// huggingface_hub / transformers (any version) and later mounts find it (hf-hub.md §6.3,
// "Recommended protocol for a third-party writer").

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace aprfs {

struct PublishRequest {
  std::string cache_dir;              // the hub cache root, e.g. DefaultHfHubCache()
  std::string repo_id;                // "org/name", or a legacy id such as "gpt2"
  std::string commit;                 // 40 lowercase hex
  std::optional<std::string> branch;  // written to refs/<branch>; "refs/pr/1" nests
  std::string path_in_repo;           // "model-00001-of-00002.safetensors", "sub/dir/file"
  std::string etag;                   // sha256 (64 hex) or git blob sha1 (40 hex), lowercase
  std::string source_path;            // the complete file; its content must match `etag`
  uint64_t size = 0;                  // expected length of the source, checked
  // Hand the source over: rename(2) it into the cache when it is on the same filesystem,
  // otherwise copy it and unlink it. On success the source path is gone (also when the blob
  // was already present). A failure leaves the source where it was (a source renamed into
  // blobs/ whose snapshot link then cannot be made is renamed back).
  bool move_source = false;
  // How long to wait for another writer (huggingface_hub, another mount) holding the lock.
  std::chrono::milliseconds lock_timeout{30000};
};

struct PublishResult {
  bool ok = false;
  std::string error;             // what failed, naming the path; empty when ok
  bool already_present = false;  // blobs/<etag> existed: the source bytes were not used
};

// Under $CACHE/.locks/models--ORG--NAME/<etag>.lock: puts the source bytes at
// blobs/<etag> (unique temp name + rename, never blobs/<etag>.incomplete), links
// snapshots/<commit>/<path_in_repo> to it with a relative symlink, and writes refs/<branch>
// (40 hex, no newline, only if it changed; a ref that cannot be written is logged, not a
// failure: the file is published once linked). Does not verify the content against the etag:
// the caller has done that (Sha256OfRange / GitBlobSha1). Never writes trees/ or .no_exist/.
// A branch that is itself a 40-hex commit gets no ref, as with the official client.
// Safe to call concurrently from several threads and processes.
PublishResult PublishToHfCache(const PublishRequest& request);

// "org/name" -> "models--org--name" (hf-hub.md §6.1).
std::string ModelRepoFolderName(const std::string& repo_id);

}  // namespace aprfs
