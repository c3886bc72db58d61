#include "format/gguf/gguf_vocab.h"

#include <optional>
#include <vector>

#include "format/error.h"
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
      return {"", "its Split regex " + nlohmann::json(regex).dump() +
                      " is not one aprfs maps to a llama.cpp pre-tokenizer"};
    }
  }
  return {"", "its pre_tokenizer " + pre.dump().substr(0, 200) +
                  " is not one aprfs maps to a llama.cpp pre-tokenizer"};
}

void AddTokenizerKeys(const GgufConfig& config, const ModelTexts& texts, uint64_t token_rows,
                      GgufMetadata& kv) {
  if (config.arch != GgufArch::kPhi3 && texts.count("tokenizer.model")) {
    throw FormatError("tokenizer.model: SentencePiece tokenizers have no GGUF view in aprfs yet");
  }
  if (config.arch == GgufArch::kPhi3) {
    // The converter reads a Phi-3 vocabulary as GPT-2 BPE only when tokenizer_config.json says
    // so (Phi-4); else with SentencePiece from tokenizer.model (Phi-3).
    const nlohmann::json tokenizer_config = ParseJsonFile(texts, "tokenizer_config.json");
    const std::string cls = tokenizer_config.is_object() && tokenizer_config.contains("tokenizer_class") &&
                                    tokenizer_config["tokenizer_class"].is_string()
                                ? tokenizer_config["tokenizer_class"].get<std::string>()
                                : std::string("(none)");
    if (cls != "GPT2Tokenizer") {
      throw FormatError("tokenizer_config.json: tokenizer_class " + cls + ": the converter reads "
                        "this Phi-3 vocabulary with SentencePiece (tokenizer.model), which has no "
                        "GGUF view in aprfs yet");
    }
  }
  const nlohmann::json tokenizer = ParseJsonFile(texts, "tokenizer.json");
  if (tokenizer.is_null()) throw FormatError("tokenizer.json: missing: llama.cpp needs the vocabulary");
  const nlohmann::json& model = tokenizer.value("model", nlohmann::json());
  if (!IsType(model, "BPE") || !model.contains("vocab") || !model["vocab"].is_object()) {
    throw FormatError("tokenizer.json: model type " + model.value("type", std::string("(none)")) +
                      ": the GGUF view maps byte-level BPE tokenizers");
  }
  if (model.value("byte_fallback", false)) {
    throw FormatError("tokenizer.json: a SentencePiece-style BPE (byte_fallback) has no GGUF "
                      "view in aprfs yet");
  }
  const PreTokenizer pre = ClassifyPreTokenizer(tokenizer);
  if (pre.name.empty()) {
    throw FormatError("tokenizer.json: " + pre.reason + " (llama.cpp would reject it or "
                      "tokenize differently; aprfs needs a rule for it)");
  }
  const nlohmann::json tokenizer_config = ParseJsonFile(texts, "tokenizer_config.json");

  // Tokens by id: the vocabulary and the added tokens; ids without a token are padding.
  const uint64_t n = config.vocab_size.value_or(token_rows);
  if (n != token_rows) {
    throw FormatError("config.json: vocab_size " + std::to_string(n) + " differs from the " +
                      std::to_string(token_rows) +
                      " rows of model.embed_tokens.weight: llama.cpp would refuse the file");
  }
  std::vector<std::string> tokens(n);
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
          token["id"].is_number_unsigned()) {
        ids[s.type] = token["id"];
        if (s.key) kv.U32(s.key, ids[s.type]);
        break;
      }
    }
  }
  for (const Special& s : kSpecials) {
    const std::string key = std::string(s.type) + "_token_id";
    if (ids.count(s.type) || !config.json.contains(key) || !config.json[key].is_number_unsigned()) continue;
    ids[s.type] = config.json[key];
    if (s.key) kv.U32(s.key, ids[s.type]);
  }

  // add_bos / add_eos: the post-processor's template, then tokenizer_config's flags.
  std::optional<bool> add_bos, add_eos;
  std::vector<nlohmann::json> processors;
  const nlohmann::json post = tokenizer.value("post_processor", nlohmann::json());
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

}  // namespace aprfs
