#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "fetch/hub_client.h"
#include "fetch/remote_origin.h"

namespace aprfs {

// A repo file on the Hub at a pinned commit, read from where the Hub redirects (its CDN's signed
// URL, resolved again before it expires or when refused), or from the Hub itself with the token.
// Versions are pinned with If-Range; an ETag that is a sha256 (the CDN names blobs by it) must
// be this file's.
class HubOrigin final : public RemoteOrigin {
 public:
  HubOrigin(HubClient& hub, std::string repo_id, std::string commit, std::string path,
            std::string sha256);
  OriginRequest RangeRequest(uint64_t begin, uint64_t length,
                             const ServerValidator* if_range) override;
  int max_attempts() const override { return hub_.config().max_attempts; }

 private:
  DataUrl CurrentUrl();
  void ForgetUrl(const std::string& url);

  HubClient& hub_;
  const std::string repo_id_, commit_, path_, sha256_;
  std::mutex url_mu_;
  std::optional<DataUrl> url_;
};

}  // namespace aprfs
