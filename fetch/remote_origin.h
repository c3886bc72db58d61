#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "fetch/http.h"

namespace aprfs {

// What identifies the version of a file a server answers from: its ETag (strong or weak), or its
// Last-Modified date when it gives no ETag. A mirror or caching proxy in front of the Hub
// (HF_ENDPOINT) gives its own ETags, not the sha256 the Hub's CDN gives.
struct ServerValidator {
  enum class Kind { None, StrongEtag, WeakEtag, LastModified };
  Kind kind = Kind::None;
  std::string value;  // as the server sent it: "\"abc\"", W/"abc", or the date

  // Of an answer's headers: ETag first, then Last-Modified.
  static ServerValidator Of(const HttpResponse& response);
  // A stable 64-bit digest of kind and value, never 0 (ChunkStore::Validator()).
  uint64_t Fingerprint() const;
  // Whether it may go in If-Range: strong ETags and dates only (RFC 9110 §13.1.5).
  bool UsableInIfRange() const { return kind == Kind::StrongEtag || kind == Kind::LastModified; }
  // The ETag without W/ and quotes (huggingface_hub's _normalize_etag), "" when not an ETag.
  std::string NormalizedEtag() const;
  std::string Describe() const;  // ETag "abc" / weak ETag W/"abc" / Last-Modified ... / none
};

// One range request to an origin, and how to judge its answer.
struct OriginRequest {
  HttpRequest http;  // URL, credentials, Range and the version's precondition
  // An answer whose validator this request must refuse, whatever version is pinned: why (fatal),
  // or "" when it may be accepted.
  std::function<std::string(const ServerValidator&)> refuse;
  // After a failed answer with this HTTP status (0: none): whether another attempt can help; may
  // add to `error` (say, that an expired URL is resolved again).
  std::function<bool(long status, std::string& error)> retryable;
};

// The origin could not even make the request (offline, the Hub refused to resolve the URL...).
class OriginError : public std::runtime_error {
 public:
  OriginError(const std::string& message, bool fatal) : std::runtime_error(message), fatal_(fatal) {}
  bool fatal() const { return fatal_; }  // retrying cannot help

 private:
  bool fatal_;
};

// Where a remote file's bytes come from (the Hub and its CDN, an S3 bucket): how to ask for a
// range and what its failures mean. RemoteFile does the rest, the same for every origin: chunks,
// read-ahead, retries with backoff, deadlines, pinned versions. Thread-safe.
class RemoteOrigin {
 public:
  virtual ~RemoteOrigin() = default;
  // The request for bytes [begin, begin + length). `if_range`: the pinned version, to send in
  // If-Range when the origin pins versions that way (null: not to send). Throws OriginError.
  virtual OriginRequest RangeRequest(uint64_t begin, uint64_t length,
                                     const ServerValidator* if_range) = 0;
  // The version known before the first request (an S3 object's listed ETag, which every request
  // then demands with If-Match); nullopt: the first answer pins it.
  virtual std::optional<ServerValidator> KnownVersion() const { return std::nullopt; }
  virtual int max_attempts() const = 0;  // per chunk, transient failures only
};

}  // namespace aprfs
