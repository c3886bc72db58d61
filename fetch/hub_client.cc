#include "fetch/hub_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

namespace aprfs {
namespace {

constexpr const char* kVersion = "0.1.0";

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// The official client's boolean rule: 1, ON, YES or TRUE, any case.
bool EnvFlag(const char* name) {
  std::optional<std::string> value = Env(name);
  if (!value) return false;
  std::string upper = *value;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return upper == "1" || upper == "ON" || upper == "YES" || upper == "TRUE";
}

std::chrono::milliseconds EnvSeconds(const char* name, std::chrono::milliseconds fallback) {
  std::optional<std::string> value = Env(name);
  if (!value) return fallback;
  char* end = nullptr;
  double seconds = std::strtod(value->c_str(), &end);
  // Non-finite or absurd values (over a day) keep the default rather than overflow.
  if (end == value->c_str() || !std::isfinite(seconds) || seconds <= 0 || seconds > 86400) {
    return fallback;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string Strip(std::string text) {
  auto space = [](unsigned char c) { return std::isspace(c); };
  text.erase(text.begin(), std::find_if_not(text.begin(), text.end(), space));
  text.erase(std::find_if_not(text.rbegin(), text.rend(), space).base(), text.end());
  return text;
}

std::string HfHome() {
  if (auto home = Env("HF_HOME")) return *home;
  if (auto xdg = Env("XDG_CACHE_HOME")) return *xdg + "/huggingface";
  return Env("HOME").value_or("") + "/.cache/huggingface";
}

std::optional<std::string> DiscoverToken() {
  if (EnvFlag("HF_HUB_DISABLE_IMPLICIT_TOKEN")) return std::nullopt;
  // A variable holding only whitespace counts as unset, as in huggingface_hub's _clean_token.
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (auto token = Env(name); token && !Strip(*token).empty()) return Strip(*token);
  }
  std::ifstream file(Env("HF_TOKEN_PATH").value_or(HfHome() + "/token"));
  if (!file) return std::nullopt;
  std::stringstream text;
  text << file.rdbuf();
  std::string token = Strip(text.str());
  if (token.empty()) return std::nullopt;
  return token;
}

}  // namespace

bool IsCommitHash(const std::string& text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

HubConfig HubConfig::FromEnvironment() {
  HubConfig config;
  if (EnvFlag("HUGGINGFACE_CO_STAGING")) config.endpoint = "https://hub-ci.huggingface.co";
  if (auto endpoint = Env("HF_ENDPOINT")) config.endpoint = *endpoint;
  while (!config.endpoint.empty() && config.endpoint.back() == '/') config.endpoint.pop_back();
  config.token = DiscoverToken();
  if (config.token) RedactInMessages(*config.token);
  std::optional<std::string> offline = Env("HF_HUB_OFFLINE");
  config.offline = offline ? EnvFlag("HF_HUB_OFFLINE") : EnvFlag("TRANSFORMERS_OFFLINE");
  config.etag_timeout = EnvSeconds("HF_HUB_ETAG_TIMEOUT", config.etag_timeout);
  config.download_timeout = EnvSeconds("HF_HUB_DOWNLOAD_TIMEOUT", config.download_timeout);
  config.user_agent = std::string("aprfs/") + kVersion + "; hf_hub/compat";
  if (auto origin = Env("HF_HUB_USER_AGENT_ORIGIN")) config.user_agent += "; origin/" + *origin;
  return config;
}

const RepoFile* RepoRevision::Find(const std::string& path) const {
  for (const RepoFile& file : files) {
    if (file.path == path) return &file;
  }
  return nullptr;
}

HubClient::HubClient(HubConfig config) : config_(std::move(config)) {}

std::vector<std::string> HubClient::Headers(bool with_token) const {
  std::vector<std::string> headers = {"User-Agent: " + config_.user_agent};
  if (with_token && config_.token) headers.push_back("Authorization: Bearer " + *config_.token);
  return headers;
}

std::string HubClient::ResolveUrl(const std::string& repo_id, const std::string& commit,
                                  const std::string& path) const {
  return config_.endpoint + "/" + repo_id + "/resolve/" + QuoteSegment(commit) + "/" +
         QuotePath(path);
}

HttpResponse HubClient::PerformWithRetries(const HttpRequest& request, int attempts) const {
  return aprfs::PerformWithRetries(request, attempts <= 0 ? config_.max_attempts : attempts);
}

HubError HubClient::ErrorFor(const HttpResponse& response) {
  using Kind = HubError::Kind;
  std::string what = response.Describe();
  if (!response.complete()) return HubError(Kind::Network, "cannot reach the Hub: " + what);
  std::string code = response.Header("x-error-code");
  long status = response.status;
  if (code == "RevisionNotFound") return HubError(Kind::RevisionNotFound, "revision not found: " + what);
  if (code == "EntryNotFound") return HubError(Kind::EntryNotFound, "file not found: " + what);
  if (code == "GatedRepo") {
    return HubError(Kind::Gated, "gated repository: request access on the Hub and set HF_TOKEN: " + what);
  }
  if (response.Header("x-error-message") == "Access to this resource is disabled.") {
    return HubError(Kind::Disabled, "repository disabled: " + what);
  }
  if (status == 401 && code != "RepoNotFound" &&
      response.Header("x-error-message") == "Invalid credentials in Authorization header") {
    return HubError(Kind::Unauthorized, "the token (HF_TOKEN or the token file) is invalid: " + what);
  }
  if (code == "RepoNotFound" || status == 401) {
    return HubError(Kind::RepoNotFound,
                    "repository not found, or private/gated and HF_TOKEN missing or invalid: " + what);
  }
  if (status == 403) return HubError(Kind::Unauthorized, "access denied: " + what);
  if (status == 429) return HubError(Kind::RateLimited, "rate limited by the Hub: " + what);
  if (status >= 500) return HubError(Kind::Server, "Hub server error: " + what);
  return HubError(Kind::Protocol, "unexpected answer: " + what);
}

RepoRevision HubClient::Resolve(const std::string& repo_id, const std::string& revision) {
  if (config_.offline) throw HubError(HubError::Kind::Offline, "HF_HUB_OFFLINE is set");
  HttpRequest request;
  request.url = config_.endpoint + "/api/models/" + repo_id + "/revision/" +
                QuoteSegment(revision) + "?blobs=true";
  request.headers = Headers(true);
  request.stall_timeout = config_.etag_timeout;
  request.deadline = std::max(config_.etag_timeout * 6, std::chrono::milliseconds(60000));
  HttpResponse response = PerformWithRetries(request);
  if (!response.complete() || response.status != 200) throw ErrorFor(response);
  auto bad = [&](const std::string& what) {
    return HubError(HubError::Kind::Protocol, request.url + ": " + what);
  };
  nlohmann::json info;
  try {
    info = nlohmann::json::parse(response.body);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("not JSON: ") + e.what());
  }
  RepoRevision result;
  result.repo_id = repo_id;
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() ||
      !IsCommitHash(info["sha"].get<std::string>())) {
    throw bad("no 40-hex \"sha\" in the answer");
  }
  result.commit = info["sha"].get<std::string>();
  if (!info.contains("siblings") || !info["siblings"].is_array()) throw bad("no \"siblings\" list");
  for (const auto& sibling : info["siblings"]) {
    if (!sibling.is_object() || !sibling.contains("rfilename") || !sibling["rfilename"].is_string()) {
      throw bad("a sibling without \"rfilename\"");
    }
    RepoFile file;
    file.path = sibling["rfilename"].get<std::string>();
    if (sibling.contains("size") && sibling["size"].is_number_unsigned()) {
      file.size = sibling["size"].get<uint64_t>();
    }
    if (sibling.contains("blobId") && sibling["blobId"].is_string()) {
      file.blob_id = sibling["blobId"].get<std::string>();
    }
    if (sibling.contains("lfs") && sibling["lfs"].is_object()) {
      const auto& lfs = sibling["lfs"];
      if (lfs.contains("sha256") && lfs["sha256"].is_string()) file.sha256 = lfs["sha256"].get<std::string>();
      if (lfs.contains("size") && lfs["size"].is_number_unsigned()) file.size = lfs["size"].get<uint64_t>();
    }
    result.files.push_back(std::move(file));
  }
  return result;
}

std::string HubClient::Download(const std::string& repo_id, const std::string& commit,
                                const std::string& path, uint64_t max_bytes) {
  if (config_.offline) throw HubError(HubError::Kind::Offline, "HF_HUB_OFFLINE is set");
  HttpRequest request;
  request.url = ResolveUrl(repo_id, commit, path);
  request.headers = Headers(true);
  request.follow_redirects = true;
  request.stall_timeout = config_.download_timeout;
  request.deadline = std::chrono::milliseconds(300000);
  request.max_collected_body = max_bytes;
  HttpResponse response = PerformWithRetries(request);
  if (!response.complete() || response.status != 200) throw ErrorFor(response);
  return std::move(response.body);
}

DataUrl HubClient::ResolveData(const std::string& repo_id, const std::string& commit,
                               const std::string& path, int attempts) {
  if (config_.offline) throw HubError(HubError::Kind::Offline, "HF_HUB_OFFLINE is set");
  std::string url = ResolveUrl(repo_id, commit, path);
  const std::string hub = OriginOf(url);
  for (int hop = 0; hop < 10; ++hop) {
    HttpRequest request;
    request.method = "HEAD";
    request.url = url;
    request.headers = Headers(true);
    request.headers.push_back("Accept-Encoding: identity");
    request.stall_timeout = config_.etag_timeout;
    request.deadline = config_.etag_timeout * 3;
    HttpResponse response = PerformWithRetries(request, attempts);
    if (!response.complete()) throw ErrorFor(response);
    if (response.status >= 300 && response.status < 400) {
      std::string location = response.Header("location");
      if (location.empty()) throw HubError(HubError::Kind::Protocol, url + ": redirect without Location");
      if (location.front() == '/') {  // relative: same host, keep the token (hf-hub.md §2.3)
        url = hub + location;
        continue;
      }
      if (OriginOf(location) == hub) {  // the Hub itself under another path: token kept
        url = location;
        continue;
      }
      // A signed CDN URL: it carries its own authorization; our token must not go there.
      return {location, false, std::chrono::steady_clock::now()};
    }
    if (response.status == 200) return {url, true, std::chrono::steady_clock::now()};
    throw ErrorFor(response);
  }
  throw HubError(HubError::Kind::Protocol, url + ": too many redirects");
}

}  // namespace aprfs
