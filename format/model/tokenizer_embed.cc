#include "format/model/tokenizer_embed.h"

#include <algorithm>

#include "format/error.h"

namespace aprfs {
namespace {

using nlohmann::json;

// Ids are bounded so a forged tokenizer cannot make us allocate a huge vocabulary.
constexpr uint64_t kMaxVocabulary = 1u << 24;

// Reads the few parts of tokenizer.json we embed while streaming through it (a SAX pass):
// a DOM of a large tokenizer costs several times its size in memory, in the daemon.
class TokenizerReader : public nlohmann::json_sax<json> {
 public:
  // Where a container sits; decides what its values mean.
  enum class Role { Root, Model, VocabObject, VocabArray, VocabPair, Merges, MergePair, Added,
                    AddedToken, Other };

  bool root_is_object = false;
  std::string error;
  std::optional<std::string> model_type;
  std::vector<std::pair<uint64_t, std::string>> vocab_ids;    // {token: id} form, file order
  StringList pieces;                                           // [[piece, score]] form
  std::vector<double> scores;
  bool pairs_ok = true;
  StringList merges;
  std::vector<std::pair<uint64_t, std::string>> added_tokens;  // file order

  bool null() override { return Scalar(Value{}); }
  bool boolean(bool) override { return Scalar(Value{}); }
  bool number_integer(number_integer_t v) override {
    return Scalar(Value{static_cast<double>(v), std::nullopt, nullptr});
  }
  bool number_unsigned(number_unsigned_t v) override {
    return Scalar(Value{static_cast<double>(v), v, nullptr});
  }
  bool number_float(number_float_t v, const string_t&) override {
    return Scalar(Value{v, std::nullopt, nullptr});
  }
  bool string(string_t& v) override { return Scalar(Value{std::nullopt, std::nullopt, &v}); }
  bool binary(binary_t&) override { return Scalar(Value{}); }
  bool key(string_t& k) override {
    stack_.back().key = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override { return Open(false); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  struct Frame {
    Role role;
    bool array;
    std::string key;   // current key, for objects
    size_t items = 0;  // values seen, for arrays
  };
  struct Value {
    std::optional<double> number;
    std::optional<uint64_t> id;
    std::string* text = nullptr;
  };

  Role ChildRole(bool array) const {
    if (stack_.empty()) return Role::Root;
    const Frame& parent = stack_.back();
    switch (parent.role) {
      case Role::Root:
        if (parent.key == "model" && !array) return Role::Model;
        if (parent.key == "added_tokens" && array) return Role::Added;
        return Role::Other;
      case Role::Model:
        if (parent.key == "vocab") return array ? Role::VocabArray : Role::VocabObject;
        if (parent.key == "merges" && array) return Role::Merges;
        return Role::Other;
      case Role::VocabArray: return array ? Role::VocabPair : Role::Other;
      case Role::Merges: return array ? Role::MergePair : Role::Other;
      case Role::Added: return array ? Role::Other : Role::AddedToken;
      default: return Role::Other;
    }
  }

  bool Open(bool array) {
    if (stack_.empty()) root_is_object = !array;
    Role role = ChildRole(array);
    if (!stack_.empty() && stack_.back().role == Role::VocabArray && role != Role::VocabPair) {
      pairs_ok = false;
    }
    if (!stack_.empty()) ++stack_.back().items;
    stack_.push_back({role, array, {}, 0});
    if (role == Role::VocabPair) pair_ = {};
    if (role == Role::MergePair) merge_ = {};
    if (role == Role::AddedToken) added_ = {};
    return true;
  }

  bool Close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    if (frame.role == Role::VocabPair) {
      if (frame.items == 2 && pair_.piece && pair_.score) {
        pieces.push_back(*pair_.piece);
        scores.push_back(*pair_.score);
      } else {
        pairs_ok = false;
      }
    } else if (frame.role == Role::MergePair && frame.items == 2 && merge_.size() == 2) {
      merges.push_back(merge_[0] + " " + merge_[1]);
    } else if (frame.role == Role::AddedToken && added_.content && added_.id) {
      added_tokens.emplace_back(*added_.id, std::move(*added_.content));
    }
    return true;
  }

  bool Scalar(const Value& value) {
    if (stack_.empty()) return true;  // a root that is not an object: reported by the caller
    Frame& frame = stack_.back();
    size_t index = frame.items++;
    switch (frame.role) {
      case Role::Model:
        if (frame.key == "type" && value.text) model_type = *value.text;
        break;
      case Role::VocabObject:
        if (value.id) vocab_ids.emplace_back(*value.id, frame.key);
        break;
      case Role::VocabArray:
        pairs_ok = false;  // an element that is not a [piece, score] pair
        break;
      case Role::VocabPair:
        if (index == 0 && value.text) pair_.piece = std::move(*value.text);
        if (index == 1 && value.number) pair_.score = *value.number;
        break;
      case Role::Merges:
        if (value.text) merges.push_back(*value.text);
        break;
      case Role::MergePair:
        if (value.text && index < 2) merge_.push_back(std::move(*value.text));
        break;
      case Role::AddedToken:
        if (frame.key == "content" && value.text) added_.content = std::move(*value.text);
        if (frame.key == "id" && value.id) added_.id = *value.id;
        break;
      default:
        break;
    }
    return true;
  }

  std::vector<Frame> stack_;
  struct {
    std::optional<std::string> piece;
    std::optional<double> score;
  } pair_;
  std::vector<std::string> merge_;
  struct {
    std::optional<std::string> content;
    std::optional<uint64_t> id;
  } added_;
};

std::optional<uint64_t> FirstAddedToken(const TokenizerReader& reader,
                                        bool (*matches)(std::string_view)) {
  for (const auto& [id, content] : reader.added_tokens) {
    if (matches(content)) return id;
  }
  return std::nullopt;
}

bool LooksLikeBos(std::string_view s) {
  return s.find("bos") != std::string_view::npos || s == "<s>" || s == "<|startoftext|>";
}

bool LooksLikeEos(std::string_view s) {
  return s.find("eos") != std::string_view::npos || s == "</s>" || s == "<|eot_id|>";
}

// BPE/WordPiece: `model.vocab` is {token: id}; added_tokens overlay it, the later one winning.
// Written straight into the vector by id: a map of 128k tokens held 10 MB more, in the daemon.
void VocabularyById(TokenizerReader& reader, const ModelConfig& config, EmbeddedTokenizer& out,
                    std::string_view file) {
  if (reader.vocab_ids.empty() && reader.added_tokens.empty()) return;
  uint64_t largest_id = 0;
  for (const auto& [id, token] : reader.vocab_ids) largest_id = std::max(largest_id, id);
  for (const auto& [id, token] : reader.added_tokens) largest_id = std::max(largest_id, id);
  uint64_t size = std::max(config.vocab_size.value_or(0), largest_id + 1);
  if (size > kMaxVocabulary) {
    throw FormatError(std::string(file) + ": token id " + std::to_string(size - 1) +
                      " is beyond the supported vocabulary size of " +
                      std::to_string(kMaxVocabulary));
  }
  std::vector<const std::string*> by_id(size, nullptr);  // the later one wins
  for (const auto& [id, token] : reader.vocab_ids) by_id[id] = &token;
  for (const auto& [id, token] : reader.added_tokens) by_id[id] = &token;
  for (const std::string* token : by_id) out.vocabulary.push_back(token ? *token : "<unk>");
  std::vector<std::pair<uint64_t, std::string>>().swap(reader.vocab_ids);
}

// Streams `text` through `reader`, retrying with Python's NaN/Infinity spellings rewritten
// (aprender tolerates them the same way).
void Read(std::string_view text, TokenizerReader& reader, std::string_view file) {
  if (json::sax_parse(text.begin(), text.end(), &reader)) return;
  std::string patched(text);
  for (auto [from, to] : {std::pair<std::string_view, std::string_view>{"-Infinity", "-1e308"},
                          {"Infinity", "1e308"},
                          {"NaN", "null"}}) {
    for (size_t at = patched.find(from); at != std::string::npos;
         at = patched.find(from, at + to.size())) {
      patched.replace(at, from.size(), to);
    }
  }
  std::string first_error = reader.error;
  reader = TokenizerReader();
  if (!json::sax_parse(patched.begin(), patched.end(), &reader)) {
    throw FormatError(std::string(file) + ": not valid JSON: " + first_error);
  }
}

}  // namespace

EmbeddedTokenizer ParseTokenizerJson(std::string_view text, const ModelConfig& config,
                                     std::string_view file) {
  TokenizerReader reader;
  Read(text, reader, file);
  if (!reader.root_is_object) throw FormatError(std::string(file) + ": must be a JSON object");

  EmbeddedTokenizer out;
  out.model_type = reader.model_type;
  if (!reader.vocab_ids.empty()) {
    VocabularyById(reader, config, out, file);
  } else if (!reader.pieces.empty() && reader.pairs_ok) {
    out.vocabulary = std::move(reader.pieces);
    out.scores = std::move(reader.scores);
  }
  if (out.vocabulary.empty()) return EmbeddedTokenizer{};
  out.merges = std::move(reader.merges);
  out.bos_token_id = config.bos_token_id ? config.bos_token_id : FirstAddedToken(reader, LooksLikeBos);
  out.eos_token_id = config.eos_token_id ? config.eos_token_id : FirstAddedToken(reader, LooksLikeEos);
  return out;
}

}  // namespace aprfs
