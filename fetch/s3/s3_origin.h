#pragma once

#include <string>

#include "fetch/remote_origin.h"
#include "fetch/s3/s3_client.h"

namespace aprfs {

// An object of an S3 bucket, pinned to the ETag it had when its model was listed: every range
// request demands that version (If-Match), so an object replaced in the bucket answers 412 and
// its reads fail rather than mix two versions.
class S3Origin final : public RemoteOrigin {
 public:
  S3Origin(const S3Client& client, std::string bucket, S3Object object);
  OriginRequest RangeRequest(uint64_t begin, uint64_t length,
                             const ServerValidator* if_range) override;
  std::optional<ServerValidator> KnownVersion() const override;
  int max_attempts() const override { return client_.options().max_attempts; }

 private:
  const S3Client& client_;
  const std::string bucket_;
  const S3Object object_;
};

}  // namespace aprfs
