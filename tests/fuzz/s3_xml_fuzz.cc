// libFuzzer target: what an S3-compatible store answers, parsed by fetch/s3/s3_xml.h: a
// ListObjectsV2 page and an <Error> document (the seeds are radosgw's own answers). Each input
// goes to both parsers, which must return, with what they promise: a parsed page's objects have
// a key and an ETag, a truncated page a continuation token, a refused one a reason; a parsed
// error a code. A crash, a sanitizer report or a broken promise is a bug.
#include <cstdint>
#include <string>
#include <string_view>

#include "fetch/s3/s3_xml.h"

using namespace aprfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  std::string error;
  if (std::optional<S3ListPage> page = ParseListObjectsV2(xml, &error)) {
    if (page->truncated && page->next_token.empty()) __builtin_trap();
    for (const S3Object& object : page->objects) {
      if (object.key.empty() || object.etag.empty()) __builtin_trap();
    }
  } else if (error.empty()) {
    __builtin_trap();
  }
  if (std::optional<S3ErrorDocument> document = ParseS3ErrorDocument(xml)) {
    if (document->code.empty()) __builtin_trap();
  }
  return 0;
}
