#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aprfs {

// One object of a bucket listing.
struct S3Object {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // as the store sends it, quotes included: "\"9b2cf535f27731c974343645a3985328\""
};

// One page of a ListObjectsV2 answer.
struct S3ListPage {
  std::vector<S3Object> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken, when truncated
};

// Parses a ListObjectsV2 answer (ListBucketResult); nullopt, `error` saying why, when it is not
// one or an object lacks its key, size or ETag.
std::optional<S3ListPage> ParseListObjectsV2(std::string_view xml, std::string* error);

// The <Error> document of a failed S3 request.
struct S3ErrorDocument {
  std::string code;     // NoSuchBucket, AccessDenied, SignatureDoesNotMatch...
  std::string message;  // may be empty (radosgw often sends none)
  std::string region;   // <Region>, for a bucket of another region (AuthorizationHeaderMalformed)
};
// nullopt when the body is not such a document (empty, HTML from a proxy...).
std::optional<S3ErrorDocument> ParseS3ErrorDocument(std::string_view xml);

}  // namespace aprfs
