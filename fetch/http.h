#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace aprfs {

// The response to one HTTP request (no redirect followed unless asked).
struct HttpResponse {
  long status = 0;                             // 0 when no complete response arrived
  std::string transport_error;                 // timeout, refused, reset, cut mid-body...
  // The server's TLS certificate was not trusted (or the CA bundle could not be read): no retry
  // can help; transport_error says why, in libcurl's detailed words.
  bool untrusted = false;
  std::map<std::string, std::string> headers;  // of the last response, names lower-case
  std::string body;                            // when the body was collected
  uint64_t body_bytes = 0;                     // bytes received (collected or streamed)
  std::string effective_url;

  bool complete() const { return transport_error.empty() && status != 0; }
  // The header's value, or "" when absent.
  std::string Header(const std::string& lower_name) const;
  // "GET url: 503 Service Unavailable" / "...: timeout after 10 s" for messages.
  std::string Describe() const;
};

// An AWS Signature V4 that libcurl computes for each request (CURLOPT_AWS_SIGV4): it signs the
// method, path, query and every header given, so the query must already be sorted and
// percent-encoded, and the payload hash given as x-amz-content-sha256 (libcurl 7.88 adds
// neither).
struct AwsSigV4 {
  std::string provider;  // "aws:amz:REGION:s3"
  std::string access_key_id;
  std::string secret_access_key;
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::optional<AwsSigV4> aws_sigv4;  // signed by libcurl when set
  std::string ca_file;                // certificates to check an https server by; "": the system's
  bool follow_redirects = false;
  std::chrono::milliseconds deadline{30000};      // the whole request
  std::chrono::milliseconds stall_timeout{10000};  // no byte received for this long
  uint64_t max_collected_body = 64ull << 20;       // when collecting into HttpResponse::body
  // When set, called once with the final response's status and headers before any body
  // byte; returning false aborts the transfer (a response we will not accept).
  std::function<bool(const HttpResponse&)> on_headers;
  // When set, body bytes go here instead of HttpResponse::body; false aborts.
  std::function<bool(std::string_view)> on_body;
  // When set, polled during the transfer (at least once a second, even while stalled);
  // returning true abandons the request (transport_error "cancelled").
  std::function<bool()> cancelled;
};

// A secret (the Hub token) that Describe() must never repeat, even when a server echoes it in
// its error message or a redirect URL: every occurrence becomes "***".
void RedactInMessages(const std::string& secret);

// One reusable libcurl handle: keeps its connections alive between requests. Not thread-safe:
// one per thread.
class HttpSession {
 public:
  HttpSession();
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  HttpResponse Perform(const HttpRequest& request);

 private:
  void* curl_;
};

// This thread's session: connections are reused by every request the thread makes.
HttpSession& ThreadHttpSession();

// How long to wait before attempt `attempt` + 1 (0-based) after `response`: the server's
// Retry-After if any (capped at 30 s), else 0.5 s doubling to 8 s, jittered to 50-150 %.
std::chrono::milliseconds RetryDelay(int attempt, const HttpResponse& response);

// Whether a failed response is worth another attempt: transport errors, 408, 429, 5xx.
bool IsTransient(const HttpResponse& response);

// Runs `request` on this thread's session, `attempts` times at most while it fails transiently
// (jittered backoff, Retry-After honoured); returns the last response.
HttpResponse PerformWithRetries(const HttpRequest& request, int attempts);

// Percent-encodes a URL path segment the way Python's quote(safe="") does (hf-hub.md §1.2).
std::string QuoteSegment(std::string_view text);
// Percent-encodes a path, keeping '/' (quote(safe="/")).
std::string QuotePath(std::string_view text);
// "http://host:port" of a URL, to tell whether a redirect leaves the host.
std::string OriginOf(std::string_view url);

}  // namespace aprfs
