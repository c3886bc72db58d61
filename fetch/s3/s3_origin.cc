#include "fetch/s3/s3_origin.h"

namespace aprfs {

S3Origin::S3Origin(const S3Client& client, std::string bucket, S3Object object)
    : client_(client), bucket_(std::move(bucket)), object_(std::move(object)) {}

OriginRequest S3Origin::RangeRequest(uint64_t begin, uint64_t length,
                                     const ServerValidator* /*if_range: If-Match instead*/) {
  OriginRequest request;
  request.http = client_.Request(bucket_, object_.key);
  request.http.headers.push_back("Range: bytes=" + std::to_string(begin) + "-" +
                                 std::to_string(begin + length - 1));
  request.http.headers.push_back("If-Match: " + object_.etag);
  request.retryable = [this](long status, std::string& error) {
    // The answer was refused at its status line, before its error document: say what the
    // status means for this object.
    HttpResponse answer;
    answer.status = status;
    if (status == 0 || status == 206) return true;  // no answer, or cut short
    S3Error meaning = client_.ErrorFor(answer, "s3://" + bucket_ + "/" + object_.key);
    error = meaning.what();
    return meaning.transient();
  };
  return request;
}

std::optional<ServerValidator> S3Origin::KnownVersion() const {
  return ServerValidator{ServerValidator::Kind::StrongEtag, object_.etag};
}

}  // namespace aprfs
