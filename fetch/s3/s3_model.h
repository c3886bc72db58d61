#pragma once

#include <string>
#include <vector>

#include "fetch/local_model.h"
#include "fetch/remote_model.h"
#include "fetch/s3/s3_client.h"

namespace aprfs {

// A model folder of an S3 source, as listed: laid out like a Hub snapshot
// (model.safetensors.index.json, shards, config.json, tokenizer.json).
struct S3ModelRef {
  S3Uri folder;                   // s3://BUCKET/PREFIX/NAME
  std::vector<S3Object> objects;  // every object under the folder, keys sorted

  // The model's name: the folder's last segment (the bucket's name for a model at its root).
  std::string Name() const;
  // The group it is listed in: the name of the folder holding it (the bucket's for a model one
  // level below the root; "" for a model at the root).
  std::string Group() const;
  // The objects' keys, sizes and ETags: another value means another version of the model.
  std::string Fingerprint() const;
};

// The model folders of a source's listing: the source itself and every folder under it that
// directly holds model.safetensors.index.json or a *.safetensors file, sorted; not folders
// inside another model folder (its shards in a subfolder).
std::vector<S3ModelRef> FindS3Models(const S3Uri& source, const std::vector<S3Object>& listing);

// The objects under a source: listed by the store (and kept in <cache_dir>/meta/s3), or, when
// the store cannot answer (unreachable, failing), the listing an earlier mount kept, with a
// warning. Throws S3Error when neither is possible, or the store refuses (no such bucket,
// access denied).
struct SourceListing {
  std::vector<S3Object> objects;
  std::string stale;  // why the store's own listing could not be had; empty when it was
};
SourceListing ListS3Source(const S3Client& client, const S3Uri& source,
                           const std::string& cache_dir);

// The model of a folder: its small files and shard headers (read once, then from the metadata
// cache, keyed by ETag), one lazily read RemoteFile per shard, pinned to its listed ETag. Throws
// S3Error or FormatError naming the object and the rule.
LoadedModel LoadS3Model(RemoteContext& context, const S3Client& client, const S3ModelRef& model);

}  // namespace aprfs
