#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "format/gguf/gguf_arch.h"
#include "format/gguf/gguf_container.h"

namespace aprfs {

// The model folder's small files by name (tokenizer.json, tokenizer_config.json,
// chat_template.jinja...), as read from disk or the Hub; absent files are not in the map.
using ModelTexts = std::map<std::string, std::string>;

// The tokenizer keys (gguf-view.md §4), on the converter's path: SentencePiece from
// tokenizer.model (Llama 2, Mistral v0.1, Phi-3-mini: tokens, scores, types), or byte-level BPE
// from tokenizer.json ("gpt2": Llama 3, Qwen2/2.5/3, Phi-4: tokens, types, merges,
// tokenizer.ggml.pre from the pre-tokenizer's structure); tokens padded to `token_rows`
// (token_embd's rows); then the special token ids, add_bos/add_eos, the chat template. Throws
// FormatError naming the file and the rule when the tokenizer is of a kind the view does not map
// yet, or when llama.cpp would tokenize it wrongly (an unknown pre-tokenizer: the message says
// what it is).
void AddTokenizerKeys(const GgufConfig& config, const ModelTexts& texts, uint64_t token_rows,
                      GgufMetadata& kv);

// llama.cpp's pre-tokenizer name for a tokenizer.json's pre_tokenizer (and model), or the
// reason it is not known.
struct PreTokenizer {
  std::string name;    // "llama-bpe", "qwen2", "gpt-2"...; empty when unknown
  std::string reason;  // why it is unknown
};
PreTokenizer ClassifyPreTokenizer(const nlohmann::json& tokenizer_json);

}  // namespace aprfs
