#include "fetch/hub_origin.h"

#include <algorithm>

namespace aprfs {
namespace {

// Signed CDN URLs live about an hour; resolve again well before.
constexpr auto kUrlLifetime = std::chrono::minutes(45);

bool IsSha256Hex(const std::string& text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

HubOrigin::HubOrigin(HubClient& hub, std::string repo_id, std::string commit, std::string path,
                     std::string sha256)
    : hub_(hub),
      repo_id_(std::move(repo_id)),
      commit_(std::move(commit)),
      path_(std::move(path)),
      sha256_(std::move(sha256)) {}

OriginRequest HubOrigin::RangeRequest(uint64_t begin, uint64_t length,
                                      const ServerValidator* if_range) {
  DataUrl url;
  try {
    url = CurrentUrl();
  } catch (const HubError& e) {
    // Offline mode or a definite answer (gone, gated): retrying cannot help.
    throw OriginError(e.what(), !e.CacheMayAnswer() || e.kind() == HubError::Kind::Offline);
  }
  OriginRequest request;
  request.http.url = url.url;
  request.http.headers = hub_.Headers(url.send_token);
  request.http.headers.push_back("Range: bytes=" + std::to_string(begin) + "-" +
                                 std::to_string(begin + length - 1));
  // The pinned version only: a server whose file changed answers with the whole new file.
  if (if_range) request.http.headers.push_back("If-Range: " + if_range->value);
  request.http.stall_timeout = hub_.config().download_timeout;
  const bool from_cdn = !url.send_token;
  request.refuse = [this, from_cdn](const ServerValidator& got) -> std::string {
    // The Hub's CDN names a blob by its sha256: one that names another blob is another file.
    const std::string etag = got.NormalizedEtag();
    if (from_cdn && IsSha256Hex(etag) && !sha256_.empty() && etag != sha256_) {
      return "the server serves another file (ETag " + etag + ", expected " + sha256_ + ")";
    }
    return "";
  };
  request.retryable = [this, from_cdn, used = url.url](long status, std::string& error) {
    if (from_cdn && (status == 400 || status == 403 || status == 410)) {
      // An expired or refused signed URL: ask the Hub for a fresh one.
      ForgetUrl(used);
      error += " (URL resolved again)";
      return true;
    }
    return !(status == 401 || status == 404 || status == 416);
  };
  return request;
}

DataUrl HubOrigin::CurrentUrl() {
  std::lock_guard lock(url_mu_);
  if (url_ && std::chrono::steady_clock::now() - url_->resolved_at < kUrlLifetime) return *url_;
  url_ = hub_.ResolveData(repo_id_, commit_, path_, /*attempts=*/1);
  return *url_;
}

void HubOrigin::ForgetUrl(const std::string& url) {
  std::lock_guard lock(url_mu_);
  if (url_ && url_->url == url) url_.reset();
}

}  // namespace aprfs
