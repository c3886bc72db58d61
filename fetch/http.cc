#include "fetch/http.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace aprfs {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return std::string(text);
}

// State shared with libcurl's callbacks for one transfer.
struct Transfer {
  const HttpRequest* request;
  HttpResponse* response;
  CURL* curl;
  bool headers_delivered = false;
  bool aborted_by_caller = false;
  bool cancelled = false;
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    t->response->headers.clear();  // a new response (after a redirect or a 100 Continue)
  } else if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    t->response->headers[Lower(std::string(line.substr(0, colon)))] =
        Trim(line.substr(colon + 1));
  }
  return size * count;
}

bool DeliverHeaders(Transfer* t) {
  if (t->headers_delivered) return true;
  t->headers_delivered = true;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &t->response->status);
  if (t->request->on_headers && !t->request->on_headers(*t->response)) {
    t->aborted_by_caller = true;
    return false;
  }
  return true;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->request->cancelled && t->request->cancelled()) {
    t->cancelled = true;
    return 1;  // libcurl ends the transfer with CURLE_ABORTED_BY_CALLBACK
  }
  return 0;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  if (!DeliverHeaders(t)) return 0;
  t->response->body_bytes += n;
  if (t->request->on_body) {
    if (!t->request->on_body(std::string_view(data, n))) {
      t->aborted_by_caller = true;
      return 0;
    }
    return n;
  }
  if (t->response->body.size() + n > t->request->max_collected_body) {
    t->aborted_by_caller = true;
    return 0;
  }
  t->response->body.append(data, n);
  return n;
}

}  // namespace

std::string HttpResponse::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

namespace {

std::mutex secrets_mu;
std::vector<std::string> secrets;  // guarded by secrets_mu

std::string Redacted(std::string text) {
  std::lock_guard lock(secrets_mu);
  for (const std::string& secret : secrets) {
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
      text.replace(at, secret.size(), "***");
    }
  }
  return text;
}

}  // namespace

void RedactInMessages(const std::string& secret) {
  if (secret.empty()) return;
  std::lock_guard lock(secrets_mu);
  if (std::find(secrets.begin(), secrets.end(), secret) != secrets.end()) return;
  secrets.push_back(secret);
  // Longest first: a secret that contains another is redacted whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

std::string HttpResponse::Describe() const {
  std::string text = effective_url + ": ";
  if (!transport_error.empty()) return Redacted(text + transport_error);
  text += "HTTP " + std::to_string(status);
  std::string code = Header("x-error-code");
  std::string message = Header("x-error-message");
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += " (" + message + ")";
  return Redacted(text);
}

HttpSession::HttpSession() {
  GlobalInit();
  curl_ = curl_easy_init();
}

HttpSession::~HttpSession() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpSession::Perform(const HttpRequest& request) {
  CURL* curl = static_cast<CURL*>(curl_);
  HttpResponse response;
  response.effective_url = request.url;
  Transfer transfer{&request, &response, curl};
  curl_easy_reset(curl);  // keeps the connection cache
  char error_detail[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_detail);
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  // Never send credentials to another host after a redirect (hf-hub.md §2.3): libcurl's
  // default, stated here so nobody turns it on.
  curl_easy_setopt(curl, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request.deadline.count()));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min(request.deadline, request.stall_timeout).count()));
  // A stalled transfer (under 1 byte/s for the stall timeout) fails instead of hanging.
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(request.stall_timeout.count() / 1000)));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L * 1024);
  if (request.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (!request.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, request.ca_file.c_str());
  if (request.aws_sigv4) {
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, request.aws_sigv4->provider.c_str());
    curl_easy_setopt(curl, CURLOPT_USERNAME, request.aws_sigv4->access_key_id.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, request.aws_sigv4->secret_access_key.c_str());
  }
  curl_slist* headers = nullptr;
  for (const std::string& header : request.headers) headers = curl_slist_append(headers, header.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  if (request.cancelled) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  }

  CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  char* url = nullptr;
  if (curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url) {
    response.effective_url = url;
  }
  if (!transfer.headers_delivered) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    if (code == CURLE_OK) DeliverHeaders(&transfer);  // bodiless responses (HEAD, 3xx, 204)
  }
  if (transfer.cancelled) {
    response.transport_error = "cancelled";
  } else if (transfer.aborted_by_caller) {
    response.transport_error = "response refused";
  } else if (code != CURLE_OK) {
    // "SSL certificate problem: unable to get local issuer certificate" says more than "SSL
    // peer certificate or SSH remote key was not OK".
    response.transport_error = error_detail[0] ? error_detail : curl_easy_strerror(code);
    response.untrusted = code == CURLE_PEER_FAILED_VERIFICATION ||
                         code == CURLE_SSL_CACERT_BADFILE || code == CURLE_SSL_CERTPROBLEM ||
                         code == CURLE_SSL_ISSUER_ERROR || code == CURLE_SSL_PINNEDPUBKEYNOTMATCH;
  }
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);  // `error_detail` goes out of scope
  return response;
}

bool IsTransient(const HttpResponse& response) {
  if (response.untrusted) return false;
  if (!response.complete()) return true;
  long s = response.status;
  return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

std::chrono::milliseconds RetryDelay(int attempt, const HttpResponse& response) {
  std::string retry_after = response.Header("retry-after");
  if (!retry_after.empty()) {
    long seconds = std::strtol(retry_after.c_str(), nullptr, 10);
    if (seconds > 0) return std::chrono::milliseconds(std::min(seconds, 30L) * 1000);
  }
  // 0.5 s doubling to 8 s, each wait jittered to 50-150 % so clients do not retry in step.
  thread_local std::mt19937 random(std::random_device{}());
  double base = std::min(8000.0, 500.0 * (1 << std::min(attempt, 4)));
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  return std::chrono::milliseconds(static_cast<int64_t>(base * jitter(random)));
}

HttpResponse PerformWithRetries(const HttpRequest& request, int attempts) {
  HttpResponse response;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    response = ThreadHttpSession().Perform(request);
    if (!IsTransient(response)) return response;
    if (attempt + 1 < attempts) {
      auto wait = RetryDelay(attempt, response);
      spdlog::debug("{} (attempt {}); retrying in {} ms", response.Describe(), attempt + 1,
                    wait.count());
      std::this_thread::sleep_for(wait);
    }
  }
  return response;
}

HttpSession& ThreadHttpSession() {
  thread_local HttpSession session;
  return session;
}

std::string QuoteSegment(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string QuotePath(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (true) {
    size_t slash = text.find('/', start);
    out += QuoteSegment(text.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

std::string OriginOf(std::string_view url) {
  size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  size_t path = url.find('/', scheme + 3);
  return Lower(std::string(url.substr(0, path)));
}

}  // namespace aprfs
