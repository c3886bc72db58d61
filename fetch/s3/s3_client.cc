#include "fetch/s3/s3_client.h"

#include <algorithm>
#include <cctype>

namespace aprfs {
namespace {

bool ValidBucketName(const std::string& name) {
  // S3's rules are stricter for new buckets; stores (and legacy buckets) accept upper case and
  // '_' too. What matters here is that it is one path segment.
  if (name.empty() || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == '_';
  });
}

// "https://host:port" -> ("https://", "host:port").
std::pair<std::string, std::string> SplitEndpoint(const std::string& endpoint) {
  size_t scheme_end = endpoint.find("://");
  size_t host_begin = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  return {endpoint.substr(0, host_begin), endpoint.substr(host_begin)};
}

std::string ObjectName(const std::string& bucket, const std::string& key) {
  return "s3://" + bucket + (key.empty() ? "" : "/" + key);
}

}  // namespace

std::optional<S3Uri> ParseS3Uri(const std::string& text, std::string* error) {
  constexpr std::string_view kScheme = "s3://";
  if (text.rfind(kScheme, 0) != 0) {
    *error = "not an s3:// URI";
    return std::nullopt;
  }
  std::string rest = text.substr(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  S3Uri uri;
  size_t slash = rest.find('/');
  uri.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) uri.prefix = rest.substr(slash + 1);
  if (!ValidBucketName(uri.bucket)) {
    *error = "bucket name '" + uri.bucket + "' is not one (letters, digits, '.', '-', '_')";
    return std::nullopt;
  }
  // The prefix names folders of models, whose paths become paths in the mount and the cache.
  size_t begin = 0;
  while (!uri.prefix.empty() && begin <= uri.prefix.size()) {
    size_t end = uri.prefix.find('/', begin);
    std::string segment = uri.prefix.substr(begin, end == std::string::npos ? end : end - begin);
    if (segment.empty() || segment == "." || segment == "..") {
      *error = "prefix '" + uri.prefix + "' has an empty, '.' or '..' segment";
      return std::nullopt;
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return uri;
}

S3Client::S3Client(S3Config config, S3ClientOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  if (config_.credentials) {
    RedactInMessages(config_.credentials->secret_access_key);
    RedactInMessages(config_.credentials->session_token);
  }
}

HttpRequest S3Client::Request(const std::string& bucket, const std::string& key,
                              std::vector<std::pair<std::string, std::string>> query) const {
  HttpRequest request;
  const auto [scheme, host] = SplitEndpoint(config_.endpoint);
  const std::string path = key.empty() ? "" : "/" + QuotePath(key);
  if (config_.VirtualHostFor(bucket)) {
    request.url = scheme + bucket + "." + host + (path.empty() ? "/" : path);
  } else {
    request.url = config_.endpoint + "/" + QuoteSegment(bucket) + path;
  }
  // SigV4 signs the query as sent: sorted by name, every name and value percent-encoded.
  for (auto& [name, value] : query) {
    name = QuoteSegment(name);
    value = QuoteSegment(value);
  }
  std::sort(query.begin(), query.end());
  for (size_t i = 0; i < query.size(); ++i) {
    request.url += (i == 0 ? "?" : "&") + query[i].first + "=" + query[i].second;
  }
  request.headers.push_back("User-Agent: " + options_.user_agent);
  if (config_.credentials) {
    request.aws_sigv4 = AwsSigV4{"aws:amz:" + config_.region + ":s3",
                                 config_.credentials->access_key_id,
                                 config_.credentials->secret_access_key};
    request.headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!config_.credentials->session_token.empty()) {
      request.headers.push_back("x-amz-security-token: " + config_.credentials->session_token);
    }
  }
  request.ca_file = config_.ca_bundle;
  request.deadline = options_.request_deadline;
  request.stall_timeout = options_.stall_timeout;
  return request;
}

std::vector<S3Object> S3Client::List(const std::string& bucket, const std::string& prefix,
                                     int attempts) const {
  std::vector<S3Object> objects;
  std::string token;
  std::string what = ObjectName(bucket, prefix);
  if (what.back() == '/') what.pop_back();
  do {
    std::vector<std::pair<std::string, std::string>> query = {{"list-type", "2"},
                                                              {"prefix", prefix}};
    if (!token.empty()) query.emplace_back("continuation-token", token);
    HttpRequest request = Request(bucket, "", std::move(query));
    HttpResponse response =
        PerformWithRetries(request, attempts > 0 ? attempts : options_.max_attempts);
    if (!response.complete() || response.status != 200) throw ErrorFor(response, what);
    std::string error;
    std::optional<S3ListPage> page = ParseListObjectsV2(response.body, &error);
    if (!page) {
      throw S3Error(S3Error::Kind::kProtocol,
                    what + ": the listing from " + config_.endpoint + " is not ListObjectsV2's: " +
                        error);
    }
    for (S3Object& object : page->objects) objects.push_back(std::move(object));
    token = page->truncated ? page->next_token : "";
  } while (!token.empty());
  return objects;
}

std::string S3Client::Get(const std::string& bucket, const S3Object& object,
                          uint64_t max_bytes) const {
  const std::string what = ObjectName(bucket, object.key);
  if (object.size > max_bytes) {
    throw S3Error(S3Error::Kind::kProtocol, what + ": " + std::to_string(object.size) +
                                                " bytes, more than the " +
                                                std::to_string(max_bytes) + " such a file may have");
  }
  HttpRequest request = Request(bucket, object.key);
  request.headers.push_back("If-Match: " + object.etag);
  request.max_collected_body = object.size;
  HttpResponse response = PerformWithRetries(request, options_.max_attempts);
  if (!response.complete() || response.status != 200) throw ErrorFor(response, what);
  if (response.body.size() != object.size) {
    throw S3Error(S3Error::Kind::kProtocol, what + ": " + std::to_string(response.body.size()) +
                                                " bytes received, the listing said " +
                                                std::to_string(object.size));
  }
  return std::move(response.body);
}

std::string S3Client::GetRange(const std::string& bucket, const S3Object& object, uint64_t begin,
                               uint64_t length) const {
  const std::string what = ObjectName(bucket, object.key);
  const std::string range = std::to_string(begin) + "-" + std::to_string(begin + length - 1);
  HttpRequest request = Request(bucket, object.key);
  request.headers.push_back("Range: bytes=" + range);
  request.headers.push_back("If-Match: " + object.etag);
  request.max_collected_body = length;
  HttpResponse response = PerformWithRetries(request, options_.max_attempts);
  if (!response.complete() || (response.status != 206 && response.status != 200)) {
    throw ErrorFor(response, what);
  }
  const std::string expected = "bytes " + range + "/" + std::to_string(object.size);
  const bool whole = response.status == 200 && begin == 0 && length == object.size;
  if ((!whole && response.Header("content-range") != expected) || response.body.size() != length) {
    throw S3Error(S3Error::Kind::kProtocol,
                  what + ": bad answer to a request of bytes " + range + " (HTTP " +
                      std::to_string(response.status) + ", Content-Range \"" +
                      response.Header("content-range") + "\", " +
                      std::to_string(response.body.size()) + " bytes)");
  }
  return std::move(response.body);
}

S3Error S3Client::ErrorFor(const HttpResponse& response, const std::string& what) const {
  using Kind = S3Error::Kind;
  if (response.untrusted) {
    return S3Error(Kind::kUntrusted,
                   what + ": the TLS certificate of " + config_.endpoint + " is not trusted (" +
                       response.transport_error +
                       "): name the CA that signed it with AWS_CA_BUNDLE or the profile's "
                       "ca_bundle" +
                       (config_.ca_bundle.empty() ? "" : " (now " + config_.ca_bundle + ")"));
  }
  if (!response.complete()) {
    return S3Error(Kind::kNetwork, what + ": no answer from " + config_.endpoint + " (" +
                                       response.transport_error + ")");
  }
  const long status = response.status;
  std::optional<S3ErrorDocument> doc = ParseS3ErrorDocument(response.body);
  const std::string code = doc ? doc->code : "";
  const std::string said = code.empty()
                               ? "HTTP " + std::to_string(status)
                               : code + (doc->message.empty() ? "" : ": " + doc->message);
  const std::string creds = config_.credentials_source;
  auto error = [&](Kind kind, const std::string& text) {
    return S3Error(kind, what + ": " + text + " (" + said + ")");
  };
  std::string region = response.Header("x-amz-bucket-region");
  if (region.empty() && doc) region = doc->region;
  if (status == 412 || code == "PreconditionFailed") {
    return error(Kind::kChanged, "the object changed in the bucket since it was listed");
  }
  if (code == "NoSuchBucket") {
    return error(Kind::kNoSuchBucket, "no such bucket at " + config_.endpoint);
  }
  if (code == "NoSuchKey" || (status == 404 && code.empty())) {
    return error(Kind::kNoSuchKey, "no such object at " + config_.endpoint);
  }
  if (code == "InvalidAccessKeyId") {
    return error(Kind::kBadCredentials, config_.endpoint + " does not know the access key ID " +
                                            (config_.credentials ? config_.credentials->access_key_id
                                                                 : "") +
                                            " (credentials from " + creds + ")");
  }
  if (code == "SignatureDoesNotMatch") {
    return error(Kind::kBadCredentials,
                 config_.endpoint + " refused the request's signature: the secret access key is "
                                    "not the one of access key ID " +
                     (config_.credentials ? config_.credentials->access_key_id : "") +
                     " (credentials from " + creds + ")");
  }
  if (code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "InvalidToken") {
    return error(Kind::kBadCredentials,
                 "the session token was refused or expired (credentials from " + creds + ")");
  }
  if (!region.empty() && region != config_.region &&
      (status == 301 || status == 400 || code == "AuthorizationHeaderMalformed" ||
       code == "PermanentRedirect")) {
    return error(Kind::kWrongRegion, "the bucket is in region " + region + ", not " +
                                         config_.region + ": set AWS_REGION=" + region);
  }
  if (code == "AccessDenied" || code == "AllAccessDisabled" || status == 403) {
    std::string hint = config_.credentials
                           ? "access denied to the credentials from " + creds
                           : "access denied to unsigned requests (" + creds +
                                 "); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                                 "AWS_PROFILE, to sign them";
    return error(Kind::kAccessDenied, hint);
  }
  if (code == "SlowDown" || status == 429 || status == 503) {
    return error(Kind::kThrottled, config_.endpoint + " asks to slow down");
  }
  if (status >= 500) return error(Kind::kServer, config_.endpoint + " failed");
  return error(Kind::kProtocol, "unexpected answer from " + config_.endpoint);
}

}  // namespace aprfs
