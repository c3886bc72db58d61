#include "fetch/s3/s3_xml.h"

#include <pugixml.hpp>

#include <charconv>

namespace aprfs {
namespace {

// A child's text; S3 answers are namespaced by xmlns only, never by prefixes.
std::string Text(const pugi::xml_node& node, const char* name) {
  return node.child(name).text().as_string();
}

bool ParseSize(const std::string& text, uint64_t* size) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *size);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool Load(pugi::xml_document& doc, std::string_view xml) {
  // parse_default keeps entity decoding (&amp; &quot; in keys and ETags) and drops comments.
  return doc.load_buffer(xml.data(), xml.size(), pugi::parse_default, pugi::encoding_utf8);
}

}  // namespace

std::optional<S3ListPage> ParseListObjectsV2(std::string_view xml, std::string* error) {
  pugi::xml_document doc;
  if (!Load(doc, xml)) {
    *error = "not XML";
    return std::nullopt;
  }
  pugi::xml_node root = doc.child("ListBucketResult");
  if (!root) {
    *error = "not a ListBucketResult";
    return std::nullopt;
  }
  S3ListPage page;
  page.truncated = Text(root, "IsTruncated") == "true";
  page.next_token = Text(root, "NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    *error = "truncated without a NextContinuationToken";
    return std::nullopt;
  }
  for (pugi::xml_node item : root.children("Contents")) {
    S3Object object;
    object.key = Text(item, "Key");
    object.etag = Text(item, "ETag");
    if (object.key.empty() || object.etag.empty() || !ParseSize(Text(item, "Size"), &object.size)) {
      *error = "an object without a key, a size or an ETag (" + object.key + ")";
      return std::nullopt;
    }
    page.objects.push_back(std::move(object));
  }
  return page;
}

std::optional<S3ErrorDocument> ParseS3ErrorDocument(std::string_view xml) {
  pugi::xml_document doc;
  if (!Load(doc, xml)) return std::nullopt;
  pugi::xml_node root = doc.child("Error");
  if (!root || Text(root, "Code").empty()) return std::nullopt;
  return S3ErrorDocument{Text(root, "Code"), Text(root, "Message"), Text(root, "Region")};
}

}  // namespace aprfs
