#include "format/safetensors/safetensors_header_sax.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace aprfs {
namespace {

using nlohmann::json;

// Follows the header's structure: {"name": {"dtype": s, "shape": [u...], "data_offsets": [u, u],
// other: any}, "__metadata__": null | {"key": s}}. Returning false stops the parse: the
// caller then falls back to the DOM path.
class EntriesReader : public nlohmann::json_sax<json> {
 public:
  SafetensorsEntries entries;

  bool null() override {
    if (Skipped()) return true;
    if (where_ == Where::MetadataValue) {  // "__metadata__": null is an empty map
      where_ = Where::Root;
      return true;
    }
    return false;
  }
  bool boolean(bool) override { return Skipped(); }
  bool number_integer(number_integer_t) override { return Skipped(); }
  bool number_float(number_float_t, const string_t&) override { return Skipped(); }
  bool binary(binary_t&) override { return Skipped(); }
  bool number_unsigned(number_unsigned_t value) override {
    if (Skipped()) return true;
    if (where_ == Where::Shape) {
      tensor_.shape.push_back(value);
      return true;
    }
    if (where_ == Where::Offsets && offsets_seen_ < 2) {
      (offsets_seen_++ == 0 ? tensor_.begin : tensor_.end) = value;
      return true;
    }
    return false;
  }
  bool string(string_t& value) override {
    if (Skipped()) return true;
    if (where_ == Where::DtypeValue) {
      std::optional<StDtype> dtype = ParseStDtype(value);
      if (!dtype) return false;
      tensor_.dtype = *dtype;
      where_ = Where::Entry;
      return true;
    }
    if (where_ == Where::MetadataField) {
      where_ = Where::MetadataObject;
      // A key twice: the DOM keeps the last value; let it.
      return entries.metadata.emplace(std::move(metadata_key_), std::move(value)).second;
    }
    return false;
  }
  bool key(string_t& key) override {
    if (skip_depth_ > 0) return true;
    if (where_ == Where::Root) {
      if (key == "__metadata__") {
        if (metadata_seen_) return false;
        metadata_seen_ = true;
        where_ = Where::MetadataValue;
      } else {
        tensor_ = SafetensorsTensor{};
        tensor_.name = key;
        fields_ = 0;
        other_fields_.clear();
        where_ = Where::EntryValue;
      }
      return true;
    }
    if (where_ == Where::Entry) {
      if (key == "dtype") return Field(kDtype, Where::DtypeValue);
      if (key == "shape") return Field(kShape, Where::ShapeValue);
      if (key == "data_offsets") return Field(kOffsets, Where::OffsetsValue);
      // Unknown fields are ignored, as serde does, but not twice.
      if (std::find(other_fields_.begin(), other_fields_.end(), key) != other_fields_.end()) {
        return false;
      }
      other_fields_.push_back(key);
      where_ = Where::OtherValue;
      return true;
    }
    if (where_ == Where::MetadataObject) {
      metadata_key_ = key;
      where_ = Where::MetadataField;
      return true;
    }
    return false;
  }
  bool start_object(std::size_t) override {
    if (skip_depth_ > 0 || where_ == Where::OtherValue) return Skip();
    switch (where_) {
      case Where::Start: where_ = Where::Root; return true;
      case Where::EntryValue: where_ = Where::Entry; return true;
      case Where::MetadataValue: where_ = Where::MetadataObject; return true;
      default: return false;
    }
  }
  bool start_array(std::size_t) override {
    if (skip_depth_ > 0 || where_ == Where::OtherValue) return Skip();
    if (where_ == Where::ShapeValue) {
      where_ = Where::Shape;
      return true;
    }
    if (where_ == Where::OffsetsValue) {
      where_ = Where::Offsets;
      offsets_seen_ = 0;
      return true;
    }
    return false;
  }
  bool end_array() override {
    if (skip_depth_ > 0) return Unskip();
    if (where_ == Where::Shape) {
      where_ = Where::Entry;
      return true;
    }
    if (where_ == Where::Offsets && offsets_seen_ == 2) {
      where_ = Where::Entry;
      return true;
    }
    return false;
  }
  bool end_object() override {
    if (skip_depth_ > 0) return Unskip();
    switch (where_) {
      case Where::Entry:
        if (fields_ != (kDtype | kShape | kOffsets)) return false;
        entries.tensors.push_back(std::move(tensor_));
        where_ = Where::Root;
        return true;
      case Where::MetadataObject: where_ = Where::Root; return true;
      case Where::Root: where_ = Where::Done; return true;
      default: return false;
    }
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  bool done() const { return where_ == Where::Done; }

 private:
  // Where the next event lands. *Value: the value of that key is next.
  enum class Where {
    Start, Root, EntryValue, Entry, DtypeValue, ShapeValue, Shape, OffsetsValue, Offsets,
    OtherValue, MetadataValue, MetadataObject, MetadataField, Done
  };
  static constexpr unsigned kDtype = 1, kShape = 2, kOffsets = 4;

  bool Field(unsigned bit, Where next) {
    if (fields_ & bit) return false;
    fields_ |= bit;
    where_ = next;
    return true;
  }
  // A scalar inside (or as) the value of an unknown field: dropped.
  bool Skipped() {
    if (skip_depth_ > 0) return true;
    if (where_ != Where::OtherValue) return false;
    where_ = Where::Entry;
    return true;
  }
  // The value of an unknown field: any JSON, read and dropped.
  bool Skip() {
    ++skip_depth_;
    return true;
  }
  bool Unskip() {
    if (--skip_depth_ == 0) where_ = Where::Entry;
    return true;
  }

  Where where_ = Where::Start;
  int skip_depth_ = 0;
  SafetensorsTensor tensor_;
  unsigned fields_ = 0;
  std::vector<std::string> other_fields_;
  bool metadata_seen_ = false;
  std::string metadata_key_;
  size_t offsets_seen_ = 0;
};

}  // namespace

std::optional<SafetensorsEntries> ReadWellFormedSafetensorsEntries(std::string_view header_json) {
  EntriesReader reader;
  if (!json::sax_parse(header_json.begin(), header_json.end(), &reader) || !reader.done()) {
    return std::nullopt;
  }
  // A name twice: the DOM path names it (and whatever comes first in the text).
  std::vector<const std::string*> names;
  names.reserve(reader.entries.tensors.size());
  for (const SafetensorsTensor& tensor : reader.entries.tensors) names.push_back(&tensor.name);
  std::sort(names.begin(), names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i) {
    if (*names[i - 1] == *names[i]) return std::nullopt;
  }
  reader.entries.tensors.shrink_to_fit();  // kept per shard until the plan is built
  return std::move(reader.entries);
}

}  // namespace aprfs
