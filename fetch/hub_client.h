#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fetch/http.h"

namespace aprfs {

// How to talk to the Hub, from the environment the official client reads (hf-hub.md §4, §5).
struct HubConfig {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, no trailing slash
  std::optional<std::string> token;  // HF_TOKEN, HUGGING_FACE_HUB_TOKEN, or the token file
  bool offline = false;              // HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE)
  std::chrono::milliseconds etag_timeout{10000};      // HF_HUB_ETAG_TIMEOUT: metadata requests
  std::chrono::milliseconds download_timeout{10000};  // HF_HUB_DOWNLOAD_TIMEOUT: a stalled read
  std::string user_agent;
  int max_attempts = 5;  // per request, transient failures only

  static HubConfig FromEnvironment();
};

// What the Hub said went wrong, mapped like huggingface_hub's hf_raise_for_status (§2.4).
class HubError : public std::runtime_error {
 public:
  enum class Kind { RepoNotFound, RevisionNotFound, EntryNotFound, Gated, Disabled, Unauthorized,
                    RateLimited, Server, Network, Protocol, Offline };
  HubError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }
  // Worth trying the local caches instead (as the official client does when the Hub is
  // unreachable): network failures, 5xx, 401/403 without a clear verdict, offline mode.
  bool CacheMayAnswer() const {
    return kind_ == Kind::Network || kind_ == Kind::Server || kind_ == Kind::Offline ||
           kind_ == Kind::RateLimited;
  }

 private:
  Kind kind_;
};

struct RepoFile {
  std::string path;
  uint64_t size = 0;
  std::string blob_id;                // git blob sha1
  std::optional<std::string> sha256;  // LFS files only: the content's sha256

  // The name of the file in the HF cache's blobs/ folder (hf-hub.md §6.1).
  const std::string& etag() const { return sha256 ? *sha256 : blob_id; }
};

struct RepoRevision {
  std::string repo_id;
  std::string commit;  // 40 hex
  std::vector<RepoFile> files;

  const RepoFile* Find(const std::string& path) const;
};

// Where to read a file's bytes: the signed CDN URL the Hub redirected to (sent without our
// token), or the Hub URL itself (with it). Expires; ask again on 403/400/410.
struct DataUrl {
  std::string url;
  bool send_token = false;
  std::chrono::steady_clock::time_point resolved_at;
};

// The Hub's HTTP protocol as the official client speaks it: revision resolution with the file
// list, small-file downloads, data URL resolution (relative redirects followed with the token,
// absolute ones returned), X-Error-Code mapping, bounded retries with jittered backoff.
// Thread-safe: each thread uses its own connection.
class HubClient {
 public:
  explicit HubClient(HubConfig config);
  const HubConfig& config() const { return config_; }

  // GET /api/models/{repo}/revision/{rev}?blobs=true.
  RepoRevision Resolve(const std::string& repo_id, const std::string& revision);
  // A small file's whole content (config.json...), following the Hub's redirects.
  std::string Download(const std::string& repo_id, const std::string& commit,
                       const std::string& path, uint64_t max_bytes);
  // HEAD of the resolve URL: where the bytes of an LFS file are served from. `attempts`
  // bounds the retries of each request (callers with their own retry loop pass 1).
  DataUrl ResolveData(const std::string& repo_id, const std::string& commit,
                      const std::string& path, int attempts = 0);
  std::string ResolveUrl(const std::string& repo_id, const std::string& commit,
                         const std::string& path) const;

  // Headers every Hub request carries (user agent, and the token unless `with_token` is off).
  std::vector<std::string> Headers(bool with_token) const;

  // Turns a failed response into the HubError the official client would raise.
  static HubError ErrorFor(const HttpResponse& response);

  // Runs `request` with retries on transient failures (transport errors, 408, 429, 5xx) and
  // jittered exponential backoff, honouring Retry-After; returns the last response.
  // `attempts` 0 means config().max_attempts.
  HttpResponse PerformWithRetries(const HttpRequest& request, int attempts = 0) const;

 private:
  HubConfig config_;
};

// True when `text` is a 40-hex commit id.
bool IsCommitHash(const std::string& text);

}  // namespace aprfs
