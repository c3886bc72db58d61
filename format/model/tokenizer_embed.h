#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/model/model_config.h"
#include "format/model/string_list.h"

namespace aprfs {

// The tokenizer as embedded in APR metadata (`tokenizer.*` keys), read from tokenizer.json the
// way aprender's importer does (notes: aprender-import.md §3), so realizar can tokenize from
// the .apr alone.
struct EmbeddedTokenizer {
  StringList vocabulary;  // by id; gaps are "<unk>"
  StringList merges;      // "left right"
  std::vector<double> scores;           // Unigram only, parallel to vocabulary
  std::optional<std::string> model_type;
  std::optional<uint64_t> bos_token_id;
  std::optional<uint64_t> eos_token_id;

  bool empty() const { return vocabulary.empty(); }
};

// Throws FormatError naming `file` when the text is not a JSON object. A tokenizer whose
// model has no usable vocabulary yields an empty result (nothing is embedded).
EmbeddedTokenizer ParseTokenizerJson(std::string_view text, const ModelConfig& config,
                                     std::string_view file);

}  // namespace aprfs
