#include "format/model/weight_index_sax.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace aprfs {
namespace {

using nlohmann::json;

// {"weight_map": {"tensor": "shard", ...}, other: any, ...}. Returning false stops the parse.
class WeightMapReader : public nlohmann::json_sax<json> {
 public:
  WeightMapEntries entries;

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t) override { return Scalar(); }
  bool number_unsigned(number_unsigned_t) override { return Scalar(); }
  bool number_float(number_float_t, const string_t&) override { return Scalar(); }
  bool binary(binary_t&) override { return Scalar(); }
  bool string(string_t& value) override {
    if (where_ == Where::MapValue) {
      where_ = Where::Map;
      // A model has a few shards and 100k tensors: each path is stored once.
      auto [it, added] = shard_ids_.emplace(std::move(value), entries.shards.size());
      if (added) entries.shards.push_back(it->first);
      entries.tensors.emplace_back(tensor_, it->second);
      return true;
    }
    return Scalar();
  }
  bool key(string_t& key) override {
    if (skip_depth_ > 0) return true;
    if (where_ == Where::Root) {
      if (key != "weight_map") {
        where_ = Where::OtherValue;
        return true;
      }
      if (seen_map_) return false;
      seen_map_ = true;
      where_ = Where::MapObject;
      return true;
    }
    if (where_ == Where::Map) {
      tensor_ = key;
      where_ = Where::MapValue;
      return true;
    }
    return false;
  }
  bool start_object(std::size_t) override {
    if (skip_depth_ > 0 || where_ == Where::OtherValue) return Skip();
    if (where_ == Where::Start) {
      where_ = Where::Root;
      return true;
    }
    if (where_ == Where::MapObject) {
      where_ = Where::Map;
      return true;
    }
    return false;
  }
  bool start_array(std::size_t) override {
    if (skip_depth_ > 0 || where_ == Where::OtherValue) return Skip();
    return false;
  }
  bool end_array() override { return skip_depth_ > 0 && Unskip(); }
  bool end_object() override {
    if (skip_depth_ > 0) return Unskip();
    if (where_ == Where::Map) {
      where_ = Where::Root;
      return true;
    }
    if (where_ == Where::Root) {
      where_ = Where::Done;
      return true;
    }
    return false;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  bool done() const { return where_ == Where::Done && seen_map_; }

 private:
  enum class Where { Start, Root, OtherValue, MapObject, Map, MapValue, Done };

  // A scalar is only welcome inside (or as) a value that is skipped.
  bool Scalar() {
    if (skip_depth_ > 0) return true;
    if (where_ != Where::OtherValue) return false;
    where_ = Where::Root;
    return true;
  }
  bool Skip() {
    ++skip_depth_;
    return true;
  }
  bool Unskip() {
    if (--skip_depth_ == 0) where_ = Where::Root;
    return true;
  }

  Where where_ = Where::Start;
  int skip_depth_ = 0;
  bool seen_map_ = false;
  std::string tensor_;
  std::map<std::string, uint32_t> shard_ids_;
};

}  // namespace

std::optional<WeightMapEntries> ReadWellFormedWeightMap(std::string_view text) {
  WeightMapReader reader;
  if (!json::sax_parse(text.begin(), text.end(), &reader) || !reader.done()) return std::nullopt;
  auto& tensors = reader.entries.tensors;
  auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(tensors.begin(), tensors.end(), by_name)) {
    std::sort(tensors.begin(), tensors.end(), by_name);
  }
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i - 1].first == tensors[i].first) return std::nullopt;  // a key twice: the DOM's
  }
  tensors.shrink_to_fit();
  return std::move(reader.entries);
}

}  // namespace aprfs
