#include "fetch/remote_origin.h"

namespace aprfs {

ServerValidator ServerValidator::Of(const HttpResponse& response) {
  ServerValidator validator;
  if (std::string etag = response.Header("etag"); !etag.empty()) {
    validator.kind = etag.rfind("W/", 0) == 0 ? Kind::WeakEtag : Kind::StrongEtag;
    validator.value = std::move(etag);
  } else if (std::string date = response.Header("last-modified"); !date.empty()) {
    validator.kind = Kind::LastModified;
    validator.value = std::move(date);
  }
  return validator;
}

uint64_t ServerValidator::Fingerprint() const {
  // FNV-1a: the same in every process and every build (it is shared through the chunk store).
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&](unsigned char c) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  };
  mix(static_cast<unsigned char>(kind));
  for (unsigned char c : value) mix(c);
  return hash == 0 ? 1 : hash;
}

std::string ServerValidator::NormalizedEtag() const {
  if (kind != Kind::StrongEtag && kind != Kind::WeakEtag) return "";
  std::string etag = value;
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

std::string ServerValidator::Describe() const {
  switch (kind) {
    case Kind::StrongEtag: return "ETag " + value;
    case Kind::WeakEtag: return "weak ETag " + value;
    case Kind::LastModified: return "Last-Modified " + value;
    case Kind::None: break;
  }
  return "no ETag or Last-Modified";
}

}  // namespace aprfs
