#include "format/tokenizer_embed.h"

#include <algorithm>
#include <map>

#include "format/error.h"

namespace aprfs {
namespace {

using nlohmann::json;

// Ids are bounded so a forged tokenizer cannot make us allocate a huge vocabulary.
constexpr uint64_t kMaxVocabulary = 1u << 24;

std::optional<uint64_t> FirstAddedToken(const json& root, bool (*matches)(std::string_view)) {
  auto added = root.find("added_tokens");
  if (added == root.end() || !added->is_array()) return std::nullopt;
  for (const json& token : *added) {
    if (!token.is_object()) continue;
    auto content = token.find("content");
    auto id = token.find("id");
    if (content == token.end() || !content->is_string() || id == token.end() ||
        !id->is_number_unsigned()) {
      continue;
    }
    if (matches(content->get_ref<const std::string&>())) return id->get<uint64_t>();
  }
  return std::nullopt;
}

bool LooksLikeBos(std::string_view s) {
  return s.find("bos") != std::string_view::npos || s == "<s>" || s == "<|startoftext|>";
}

bool LooksLikeEos(std::string_view s) {
  return s.find("eos") != std::string_view::npos || s == "</s>" || s == "<|eot_id|>";
}

// BPE/WordPiece: `model.vocab` is {token: id}; added_tokens overlay it.
void ReadVocabObject(const json& root, const json& vocab, const ModelConfig& config,
                     EmbeddedTokenizer& out, std::string_view file) {
  std::map<uint64_t, std::string> by_id;
  for (const auto& [token, id] : vocab.items()) {
    if (id.is_number_unsigned()) by_id[id.get<uint64_t>()] = token;
  }
  auto added = root.find("added_tokens");
  if (added != root.end() && added->is_array()) {
    for (const json& token : *added) {
      if (!token.is_object()) continue;
      auto content = token.find("content");
      auto id = token.find("id");
      if (content != token.end() && content->is_string() && id != token.end() &&
          id->is_number_unsigned()) {
        by_id[id->get<uint64_t>()] = content->get<std::string>();
      }
    }
  }
  if (by_id.empty()) return;
  uint64_t size = std::max(config.vocab_size.value_or(0), by_id.rbegin()->first + 1);
  if (size > kMaxVocabulary) {
    throw FormatError(std::string(file) + ": token id " + std::to_string(size - 1) +
                      " is beyond the supported vocabulary size of " +
                      std::to_string(kMaxVocabulary));
  }
  out.vocabulary.assign(size, "<unk>");
  for (auto& [id, token] : by_id) out.vocabulary[id] = std::move(token);
}

// Unigram: `model.vocab` is [[piece, score], ...] in id order.
void ReadVocabPairs(const json& vocab, EmbeddedTokenizer& out) {
  for (const json& pair : vocab) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_number()) {
      out.vocabulary.clear();
      out.scores.clear();
      return;
    }
    out.vocabulary.push_back(pair[0].get<std::string>());
    out.scores.push_back(pair[1].get<double>());
  }
}

void ReadMerges(const json& model, EmbeddedTokenizer& out) {
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return;
  out.merges.reserve(merges->size());
  for (const json& merge : *merges) {
    if (merge.is_string()) {
      out.merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      out.merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    }
  }
}

}  // namespace

EmbeddedTokenizer ParseTokenizerJson(std::string_view text, const ModelConfig& config,
                                     std::string_view file) {
  json root;
  try {
    root = ParseLenientJson(text);
  } catch (const json::exception& e) {
    throw FormatError(std::string(file) + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw FormatError(std::string(file) + ": must be a JSON object");

  EmbeddedTokenizer out;
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) return out;
  auto type = model->find("type");
  if (type != model->end() && type->is_string()) out.model_type = type->get<std::string>();
  auto vocab = model->find("vocab");
  if (vocab == model->end()) return out;
  if (vocab->is_object()) {
    ReadVocabObject(root, *vocab, config, out, file);
  } else if (vocab->is_array()) {
    ReadVocabPairs(*vocab, out);
  }
  if (out.vocabulary.empty()) return EmbeddedTokenizer{};
  ReadMerges(*model, out);
  out.bos_token_id = config.bos_token_id ? config.bos_token_id : FirstAddedToken(root, LooksLikeBos);
  out.eos_token_id = config.eos_token_id ? config.eos_token_id : FirstAddedToken(root, LooksLikeEos);
  return out;
}

}  // namespace aprfs
