#include "format/gguf/gguf_vocab.h"

#include <optional>
#include <vector>

#include "format/error.h"
#include "format/gguf/sentencepiece_model.h"
#include "format/model/model_config.h"

namespace aprfs {
namespace {

// The regexes of the Split pre-tokenizers llama.cpp knows, as tokenizer.json spells them.
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// o200k (GPT-4o, Phi-4-mini, Llama 4) and Mistral's tekken: words split at case changes.
constexpr const char* kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

bool IsType(const nlohmann::json& j, const char* type) {
  return j.is_object() && j.contains("type") && j["type"] == type;
}

// The converter's "does this token look special" rule (§4.2).
bool LooksSpecial(const std::string& t) {
  auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// A `<type>_token` entry of tokenizer_config.json: a string, or an object with `content`.
std::optional<std::string> TokenText(const nlohmann::json& config, const std::string& key) {
  if (!config.contains(key)) return std::nullopt;
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

nlohmann::json ParseJsonFile(const ModelTexts& texts, const std::string& name) {
  auto it = texts.find(name);
  if (it == texts.end()) return nlohmann::json();
  nlohmann::json json = ParseLenientJson(it->second);
  if (!json.is_object()) throw FormatError(name + ": not a JSON object");
  return json;
}

}  // namespace

PreTokenizer ClassifyPreTokenizer(const nlohmann::json& tokenizer) {
  const nlohmann::json pre = tokenizer.value("pre_tokenizer", nlohmann::json());
  const bool ignore_merges = tokenizer.contains("model") && tokenizer["model"].is_object() &&
                             tokenizer["model"].value("ignore_merges", false);
  if (IsType(pre, "ByteLevel") && pre.value("use_regex", true)) return {"gpt-2", ""};
  if (IsType(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    const nlohmann::json& parts = pre["pretokenizers"];
    if (parts.size() == 2 && IsType(parts[0], "Digits") && parts[0].value("individual_digits", false) &&
        IsType(parts[1], "ByteLevel") && parts[1].value("use_regex", true)) {
      return {"smollm", ""};
    }
    if (parts.size() == 2 && IsType(parts[0], "Split") && IsType(parts[1], "ByteLevel") &&
        !parts[1].value("use_regex", true) && parts[0].value("behavior", "") == "Isolated" &&
        parts[0].contains("pattern") && parts[0]["pattern"].is_object() &&
        parts[0]["pattern"].contains("Regex") && parts[0]["pattern"]["Regex"].is_string()) {
      const std::string regex = parts[0]["pattern"]["Regex"];
      if (regex == kLlama3Regex) return {ignore_merges ? "llama-bpe" : "dbrx", ""};
      if (regex == kQwen2Regex) return {"qwen2", ""};
      if (regex == kGpt4oRegex) return {"gpt-4o", ""};
      if (regex == kTekkenRegex) return {"tekken", ""};
      return {"", "its Split regex " + nlohmann::json(regex).dump() +
                      " is not one aprfs maps to a llama.cpp pre-tokenizer"};
    }
  }
  return {"", "its pre_tokenizer " + pre.dump().substr(0, 200) +
                  " is not one aprfs maps to a llama.cpp pre-tokenizer"};
}

namespace {

// The converter's "gpt2" path (§4.2): tokens padded to `n`, their types, the merges, the
// pre-tokenizer's name. Returns tokenizer.json, which the special ids are looked up in.
nlohmann::json AddGpt2Vocab(const ModelTexts& texts, uint64_t n, std::vector<std::string>& tokens,
                            GgufMetadata& kv) {
  const nlohmann::json tokenizer = ParseJsonFile(texts, "tokenizer.json");
  if (tokenizer.is_null()) throw FormatError("tokenizer.json: missing: llama.cpp needs the vocabulary");
  const nlohmann::json& model = tokenizer.value("model", nlohmann::json());
  if (!IsType(model, "BPE") || !model.contains("vocab") || !model["vocab"].is_object()) {
    throw FormatError("tokenizer.json: model type " + model.value("type", std::string("(none)")) +
                      ": the GGUF view maps byte-level BPE tokenizers");
  }
  if (model.value("byte_fallback", false)) {
    throw FormatError("tokenizer.json: a SentencePiece-style BPE (byte_fallback) without a "
                      "tokenizer.model has no GGUF view in aprfs yet");
  }
  const PreTokenizer pre = ClassifyPreTokenizer(tokenizer);
  if (pre.name.empty()) {
    throw FormatError("tokenizer.json: " + pre.reason + " (llama.cpp would reject it or "
                      "tokenize differently; aprfs needs a rule for it)");
  }

  // Tokens by id: the vocabulary and the added tokens; ids without a token are padding.
  tokens.assign(n, std::string());
  std::vector<int32_t> types(n, kUnused);
  std::vector<bool> known(n, false);
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= n) continue;
    tokens[id.get<uint64_t>()] = text;
    types[id.get<uint64_t>()] = kNormal;
    known[id.get<uint64_t>()] = true;
  }
  const nlohmann::json added = tokenizer.value("added_tokens", nlohmann::json::array());
  for (const nlohmann::json& token : added) {
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_unsigned() ||
        !token.contains("content") || !token["content"].is_string()) {
      continue;
    }
    const uint64_t id = token["id"];
    if (id >= n) continue;
    const std::string content = token["content"];
    known[id] = true;
    if (token.value("special", false) || LooksSpecial(content)) {
      tokens[id] = content;
      types[id] = kControl;
    } else {
      tokens[id] = ReplaceAll(content, "\xe2\x96\x81", " ");
      types[id] = kUserDefined;
    }
  }
  for (uint64_t id = 0; id < n; ++id) {
    if (!known[id]) tokens[id] = "[PAD" + std::to_string(id) + "]";
  }

  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const nlohmann::json& merge : model["merges"]) {
      if (merge.is_string()) {
        merges.push_back(merge);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        merges.push_back(ReplaceAll(merge[0], " ", "\xc4\xa0") + " " +
                         ReplaceAll(merge[1], " ", "\xc4\xa0"));
      }
    }
  }
  if (merges.empty()) throw FormatError("tokenizer.json: no merges: llama.cpp needs them for BPE");

  kv.String("tokenizer.ggml.model", "gpt2");
  kv.String("tokenizer.ggml.pre", pre.name);
  kv.StringArray("tokenizer.ggml.tokens", tokens);
  kv.I32Array("tokenizer.ggml.token_type", types);
  kv.StringArray("tokenizer.ggml.merges", merges);

  return tokenizer;
}

// The converter's SentencePiece path (§4.3) from tokenizer.model: pieces by id up to `n`
// ([PAD{id}] beyond), user-defined pieces typed normal, then added_tokens.json and
// tokenizer_config.json's added_tokens_decoder (the Phi-3 variant: also tokenizer.json's
// added_tokens, without the "looks special" rule and the U+2581 replacement).
void AddSentencePieceVocab(const GgufConfig& config, const ModelTexts& texts,
                           const nlohmann::json& tokenizer_config, uint64_t n,
                           std::vector<std::string>& tokens, GgufMetadata& kv) {
  const bool phi3 = config.arch == GgufArch::kPhi3;
  auto model = texts.find("tokenizer.model");
  if (model == texts.end()) {
    throw FormatError("tokenizer.model: missing: the converter reads this model's vocabulary with "
                      "SentencePiece");
  }
  const std::vector<SentencePiece> pieces = ParseSentencePieceModel(model->second, "tokenizer.model");
  tokens.assign(n, std::string());
  std::vector<float> scores(n, -10000.0f);
  std::vector<int32_t> types(n, kUnused);
  for (uint64_t id = 0; id < n; ++id) tokens[id] = "[PAD" + std::to_string(id) + "]";
  for (uint64_t id = 0; id < pieces.size() && id < n; ++id) {
    tokens[id] = pieces[id].piece;
    scores[id] = pieces[id].score;
    types[id] = pieces[id].type == SentencePiece::kUserDefined ? kNormal : pieces[id].type;
  }
  auto set = [&](uint64_t id, const std::string& text, int32_t type) {
    tokens[id] = text;
    scores[id] = -1000.0f;
    types[id] = type;
  };
  const nlohmann::json added_file = ParseJsonFile(texts, "added_tokens.json");
  if (added_file.is_object()) {
    for (const auto& [text, id] : added_file.items()) {
      if (id.is_number_unsigned() && id.get<uint64_t>() < n) set(id, text, kUserDefined);
    }
  }
  auto add_decoded = [&](uint64_t id, const nlohmann::json& data, bool converter_rules) {
    if (id >= n || !data.is_object() || !data.contains("content") || !data["content"].is_string()) return;
    const std::string content = data["content"];
    const bool control = data.value("special", false) || (converter_rules && LooksSpecial(content));
    if (control) {
      set(id, content, kControl);
    } else {
      set(id, converter_rules ? ReplaceAll(content, "\xe2\x96\x81", " ") : content, kUserDefined);
    }
  };
  if (tokenizer_config.is_object() && tokenizer_config.contains("added_tokens_decoder") &&
      tokenizer_config["added_tokens_decoder"].is_object()) {
    for (const auto& [key, data] : tokenizer_config["added_tokens_decoder"].items()) {
      if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos || key.size() > 18) continue;
      add_decoded(std::stoull(key), data, !phi3);
    }
  }
  if (phi3) {
    const nlohmann::json tokenizer = ParseJsonFile(texts, "tokenizer.json");
    if (tokenizer.is_object() && tokenizer.contains("added_tokens") && tokenizer["added_tokens"].is_array()) {
      for (const nlohmann::json& token : tokenizer["added_tokens"]) {
        if (token.is_object() && token.contains("id") && token["id"].is_number_unsigned()) {
          add_decoded(token["id"], token, false);
        }
      }
    }
  }
  kv.String("tokenizer.ggml.model", "llama");
  kv.String("tokenizer.ggml.pre", "default");
  kv.StringArray("tokenizer.ggml.tokens", tokens);
  kv.F32Array("tokenizer.ggml.scores", scores);
  kv.I32Array("tokenizer.ggml.token_type", types);
}

// The special-token block (§4.5): ids from tokenizer_config's token texts found among
// tokenizer.json's added tokens, then config.json's integer ids (below `n` on the SentencePiece
// path); add_bos/add_eos; the chat template.
void AddSpecialVocab(const GgufConfig& config, const ModelTexts& texts, const nlohmann::json& tokenizer,
                     const nlohmann::json& tokenizer_config, const std::vector<std::string>& tokens,
                     bool sentencepiece, GgufMetadata& kv) {
  const uint64_t n = tokens.size();
  const nlohmann::json added = tokenizer.is_object() ? tokenizer.value("added_tokens", nlohmann::json::array())
                                                     : nlohmann::json::array();
  // Special ids (§4.5): tokenizer_config's token texts, found among the added tokens; then
  // config.json's integer ids for the types still missing.
  struct Special {
    const char* type;
    const char* key;
  };
  static const Special kSpecials[] = {
      {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", nullptr},
      {"mask", "tokenizer.ggml.mask_token_id"}};
  std::map<std::string, std::string> texts_of;  // type -> token text, from tokenizer_config
  if (tokenizer_config.is_object()) {
    for (const Special& s : kSpecials) {
      if (auto text = TokenText(tokenizer_config, std::string(s.type) + "_token")) texts_of[s.type] = *text;
    }
    if (!texts_of.count("bos") && texts_of.count("cls")) texts_of["bos"] = texts_of["cls"];
    if (!texts_of.count("eos") && texts_of.count("sep")) texts_of["eos"] = texts_of["sep"];
  }
  std::map<std::string, uint32_t> ids;
  for (const Special& s : kSpecials) {
    auto text = texts_of.find(s.type);
    if (text == texts_of.end()) continue;
    for (const nlohmann::json& token : added) {
      if (token.is_object() && token.value("content", "") == text->second && token.contains("id") &&
          token["id"].is_number_unsigned() && !(sentencepiece && token["id"].get<uint64_t>() >= n)) {
        ids[s.type] = token["id"];
        if (s.key) kv.U32(s.key, ids[s.type]);
        break;
      }
    }
  }
  for (const Special& s : kSpecials) {
    const std::string key = std::string(s.type) + "_token_id";
    if (ids.count(s.type) || !config.json.contains(key) || !config.json[key].is_number_unsigned()) continue;
    if (sentencepiece && config.json[key].get<uint64_t>() >= n) continue;
    ids[s.type] = config.json[key];
    if (s.key) kv.U32(s.key, ids[s.type]);
  }

  // add_bos / add_eos: the post-processor's template, then tokenizer_config's flags.
  std::optional<bool> add_bos, add_eos;
  std::vector<nlohmann::json> processors;
  const nlohmann::json post = tokenizer.is_object() ? tokenizer.value("post_processor", nlohmann::json())
                                                    : nlohmann::json();
  if (IsType(post, "Sequence") && post.contains("processors") && post["processors"].is_array()) {
    for (const nlohmann::json& p : post["processors"]) processors.push_back(p);
  } else if (post.is_object()) {
    processors.push_back(post);
  }
  auto text_of_id = [&](const char* type) -> std::string {
    auto it = ids.find(type);
    return it != ids.end() && it->second < n ? tokens[it->second] : std::string();
  };
  for (const nlohmann::json& p : processors) {
    if (IsType(p, "RobertaProcessing")) {
      add_bos = add_eos = true;
    } else if (IsType(p, "TemplateProcessing") && p.contains("single") && p["single"].is_array()) {
      const nlohmann::json& single = p["single"];
      auto special_id = [](const nlohmann::json& item) -> std::string {
        return item.is_object() && item.contains("SpecialToken")
                   ? item["SpecialToken"].value("id", std::string())
                   : std::string();
      };
      if (single.size() > 1) {
        const std::string first = special_id(single.front());
        add_bos = !first.empty() && (first == text_of_id("bos") || first == text_of_id("cls"));
      }
      const std::string last = special_id(single.back());
      add_eos = !last.empty() && last == text_of_id("eos");
    }
  }
  if (tokenizer_config.is_object()) {
    if (tokenizer_config.contains("add_bos_token") && tokenizer_config["add_bos_token"].is_boolean()) {
      add_bos = tokenizer_config["add_bos_token"].get<bool>();
    }
    if (tokenizer_config.contains("add_eos_token") && tokenizer_config["add_eos_token"].is_boolean()) {
      add_eos = tokenizer_config["add_eos_token"].get<bool>();
    }
  }
  if (add_bos) kv.Bool("tokenizer.ggml.add_bos_token", *add_bos);
  if (add_eos) kv.Bool("tokenizer.ggml.add_eos_token", *add_eos);

  // The chat template: tokenizer_config's, else chat_template.jinja.
  std::optional<std::string> chat_template;
  if (tokenizer_config.is_object() && tokenizer_config.contains("chat_template")) {
    const nlohmann::json& t = tokenizer_config["chat_template"];
    if (t.is_string()) {
      chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const nlohmann::json& entry : t) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          chat_template = entry["template"].get<std::string>();
        }
      }
    }
  }
  if (!chat_template) {
    auto jinja = texts.find("chat_template.jinja");
    if (jinja != texts.end()) chat_template = jinja->second;
  }
  if (chat_template) kv.String("tokenizer.chat_template", *chat_template);
}

}  // namespace

void AddTokenizerKeys(const GgufConfig& config, const ModelTexts& texts, uint64_t token_rows,
                      GgufMetadata& kv) {
  const nlohmann::json tokenizer_config = ParseJsonFile(texts, "tokenizer_config.json");
  const uint64_t n = config.vocab_size.value_or(token_rows);
  if (n != token_rows) {
    throw FormatError("config.json: vocab_size " + std::to_string(n) + " differs from the " +
                      std::to_string(token_rows) +
                      " rows of model.embed_tokens.weight: llama.cpp would refuse the file");
  }
  // The converter's choice of path (§4.1): Phi-3 reads GPT-2 BPE when tokenizer_config.json
  // names GPT2Tokenizer (Phi-4), else SentencePiece; the others SentencePiece when there is a
  // tokenizer.model, else GPT-2 BPE.
  bool sentencepiece = texts.count("tokenizer.model") > 0;
  if (NormsStoreOnePlus(config.arch) && !sentencepiece) {
    // Gemma 2's converter requires it; Gemma 3's would hash tokenizer.json's pre-tokenizer,
    // which no table knows (gguf-view.md §9.4).
    throw FormatError("tokenizer.model: missing: the GGUF view reads Gemma's vocabulary from "
                      "its SentencePiece model");
  }
  if (config.arch == GgufArch::kPhi3) {
    const nlohmann::json cls = tokenizer_config.is_object() ? tokenizer_config.value("tokenizer_class", nlohmann::json())
                                                            : nlohmann::json();
    sentencepiece = !(cls.is_string() && cls == "GPT2Tokenizer");
  }
  if (config.arch == GgufArch::kLlama && tokenizer_config.is_object() &&
      tokenizer_config.contains("add_prefix_space") && tokenizer_config["add_prefix_space"].is_boolean()) {
    kv.Bool("tokenizer.ggml.add_space_prefix", tokenizer_config["add_prefix_space"].get<bool>());
  }
  std::vector<std::string> tokens;
  nlohmann::json tokenizer;
  if (sentencepiece) {
    AddSentencePieceVocab(config, texts, tokenizer_config, n, tokens, kv);
    tokenizer = ParseJsonFile(texts, "tokenizer.json");
  } else {
    tokenizer = AddGpt2Vocab(texts, n, tokens, kv);
  }
  AddSpecialVocab(config, texts, tokenizer, tokenizer_config, tokens, sentencepiece, kv);
  // Gemma's SentencePiece adds no space in front of the text.
  if (NormsStoreOnePlus(config.arch)) kv.Bool("tokenizer.ggml.add_space_prefix", false);
}

}  // namespace aprfs
