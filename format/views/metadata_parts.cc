#include "format/views/metadata_parts.h"

#include <algorithm>
#include <charconv>
#include <type_traits>

#include "format/apr/json_spelling.h"

namespace aprfs {
namespace {

void AppendShapeJson(std::string& out, const std::vector<uint64_t>& shape) {
  out += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    char digits[24];
    out.append(digits, std::to_chars(digits, digits + sizeof digits, shape[i]).ptr);
  }
  out += ']';
}

template <typename List, typename Append>
std::string ArrayJson(const List& items, Append append) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    append(out, items[i]);
  }
  out += ']';
  return out;
}

// Spells the tokenizer into `custom`; a mutable `tokenizer` loses each list once it is spelled
// (a 128k vocabulary and its JSON are megabytes each).
template <typename Tokenizer>
void AddTokenizerTo(Tokenizer& tokenizer, std::map<std::string, std::string>& custom) {
  constexpr bool consume = !std::is_const_v<Tokenizer>;
  auto release = [](auto& list) {
    if constexpr (consume) std::remove_reference_t<decltype(list)>().swap(list);
  };
  if (tokenizer.empty()) return;
  custom["tokenizer.vocab_size"] = std::to_string(tokenizer.vocabulary.size());
  custom["tokenizer.vocabulary"] = ArrayJson(tokenizer.vocabulary, AppendJsonString);
  release(tokenizer.vocabulary);
  if (!tokenizer.merges.empty()) {
    custom["tokenizer.merges"] = ArrayJson(tokenizer.merges, AppendJsonString);
    release(tokenizer.merges);
  }
  if (!tokenizer.scores.empty()) {
    custom["tokenizer.scores"] = ArrayJson(tokenizer.scores, AppendJsonF64);
    release(tokenizer.scores);
  }
  if (tokenizer.model_type) {
    std::string text;
    AppendJsonString(text, *tokenizer.model_type);
    custom["tokenizer.model_type"] = text;
  }
  if (tokenizer.bos_token_id) {
    custom["tokenizer.bos_token_id"] = std::to_string(*tokenizer.bos_token_id);
  }
  if (tokenizer.eos_token_id) {
    custom["tokenizer.eos_token_id"] = std::to_string(*tokenizer.eos_token_id);
  }
}


}  // namespace

uint64_t ElementCount(const std::vector<uint64_t>& shape) {
  uint64_t count = 1;
  for (uint64_t dim : shape) count *= dim;  // validated against the byte size already
  return count;
}

// Sized exactly before it is written: for a large model it is megabytes, and doubling would
// hold twice that.
std::string TensorShapesJson(const std::vector<AprTensorSpec>& tensors) {
  std::vector<uint32_t> order(tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; });
  auto last_of_name = [&](size_t k) {
    return k + 1 == order.size() || tensors[order[k + 1]].name != tensors[order[k]].name;
  };
  std::string text;
  auto write_all = [&](std::string& out) {
    out += '{';
    bool first = true;
    for (size_t k = 0; k < order.size(); ++k) {
      if (!last_of_name(k)) continue;
      if (!first) out += ',';
      first = false;
      AppendJsonString(out, tensors[order[k]].name);
      out += ':';
      AppendShapeJson(out, tensors[order[k]].shape);
    }
    out += '}';
  };
  size_t size = 0;
  {
    std::string scratch;  // one entry at a time, to count
    for (size_t k = 0; k < order.size(); ++k) {
      if (!last_of_name(k)) continue;
      scratch.clear();
      AppendJsonString(scratch, tensors[order[k]].name);
      AppendShapeJson(scratch, tensors[order[k]].shape);
      size += scratch.size() + 2;  // ':' and ','
    }
  }
  text.reserve(size + 2);
  write_all(text);
  return text;
}

std::optional<std::string> SourceMetadataJson(const ShardSet& set) {
  std::map<std::string, std::string> metadata;  // the first shard that sets a key wins
  for (const Shard& shard : set.shards) metadata.insert(shard.header.metadata.begin(), shard.header.metadata.end());
  if (metadata.empty()) return std::nullopt;
  std::string text = "{";
  for (const auto& [key, value] : metadata) {
    if (text.size() > 1) text += ',';
    AppendJsonString(text, key);
    text += ':';
    AppendJsonString(text, value);
  }
  return text + "}";
}

void AddTokenizerKeys(const EmbeddedTokenizer& tokenizer, std::map<std::string, std::string>& custom) {
  AddTokenizerTo(tokenizer, custom);
}

void AddTokenizerKeys(EmbeddedTokenizer&& tokenizer, std::map<std::string, std::string>& custom) {
  AddTokenizerTo(tokenizer, custom);
}

}  // namespace aprfs
