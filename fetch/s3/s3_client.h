#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fetch/http.h"
#include "fetch/s3/aws_config.h"
#include "fetch/s3/s3_xml.h"

namespace aprfs {

// s3://BUCKET[/PREFIX]: a bucket, or the objects under a prefix of it.
struct S3Uri {
  std::string bucket;
  std::string prefix;  // no leading or trailing '/'; "" for the whole bucket

  std::string ToString() const { return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix); }
  // The key of `path` under the prefix.
  std::string Key(const std::string& path) const { return prefix.empty() ? path : prefix + "/" + path; }
};
// Parses s3://BUCKET[/PREFIX][/]; nullopt, `error` saying why, when it is not one (a bucket
// name breaks S3's naming rules, a prefix with an empty, "." or ".." segment).
std::optional<S3Uri> ParseS3Uri(const std::string& text, std::string* error);

// A failed S3 request, with what the store's error code means for the user.
class S3Error : public std::runtime_error {
 public:
  enum class Kind {
    kNoSuchBucket,
    kNoSuchKey,
    kAccessDenied,    // AccessDenied, and 403 without a document
    kBadCredentials,  // InvalidAccessKeyId, SignatureDoesNotMatch, ExpiredToken...
    kWrongRegion,     // the bucket lives in another region
    kChanged,         // 412: the object is not the version asked for
    kThrottled,       // SlowDown, 429, 503
    kServer,          // 5xx, InternalError
    kNetwork,         // no answer: refused, reset, timeout
    kUntrusted,       // the endpoint's TLS certificate is not trusted
    kProtocol,        // an answer that makes no sense
  };
  S3Error(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }
  // Worth another attempt later (and, for a mount, worth trying its cached metadata).
  bool transient() const {
    return kind_ == Kind::kThrottled || kind_ == Kind::kServer || kind_ == Kind::kNetwork;
  }

 private:
  Kind kind_;
};

struct S3ClientOptions {
  std::chrono::milliseconds request_deadline{30000};
  std::chrono::milliseconds stall_timeout{10000};
  int max_attempts = 5;  // per request, transient failures only
  std::string user_agent = "aprfs/0.1";
};

// The S3 REST API as much as reading models needs: ListObjectsV2, GET (whole, ranged, If-Match)
// of any S3-compatible store, signed with SigV4 by libcurl, or unsigned for public buckets.
// Thread-safe: each thread uses its own connection.
class S3Client {
 public:
  explicit S3Client(S3Config config, S3ClientOptions options = {});
  const S3Config& config() const { return config_; }
  const S3ClientOptions& options() const { return options_; }

  // A GET of `key` in `bucket` ("" key: the bucket itself) with its query, addressed and
  // signed as configured. Callers add Range, If-Match...
  HttpRequest Request(const std::string& bucket, const std::string& key,
                      std::vector<std::pair<std::string, std::string>> query = {}) const;

  // Every object whose key starts with `prefix` (all pages). `attempts` bounds the tries of
  // each page (0: options().max_attempts). Throws S3Error.
  std::vector<S3Object> List(const std::string& bucket, const std::string& prefix,
                             int attempts = 0) const;
  // The whole object, which must be `etag` (If-Match) and at most `max_bytes`. Throws S3Error.
  std::string Get(const std::string& bucket, const S3Object& object, uint64_t max_bytes) const;
  // Bytes [begin, begin + length) of the object, which must be `object.etag`. Throws S3Error.
  std::string GetRange(const std::string& bucket, const S3Object& object, uint64_t begin,
                       uint64_t length) const;

  // The S3Error a failed answer to a request about `what` ("s3://bucket/key") means: the
  // error document's code (its body, when collected) and the status, in words that say what to
  // do.
  S3Error ErrorFor(const HttpResponse& response, const std::string& what) const;

 private:
  S3Config config_;
  S3ClientOptions options_;
};

}  // namespace aprfs
