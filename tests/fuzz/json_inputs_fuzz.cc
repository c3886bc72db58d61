// libFuzzer target: the small input files of a model folder. The first byte picks the parser:
// model.safetensors.index.json, config.json, tokenizer.json or tokenizer.model (SentencePiece's
// protobuf). Each must either return or throw FormatError; any other exception, crash or
// sanitizer report is a bug.
#include <cstdint>
#include <string>
#include <string_view>

#include "format/error.h"
#include "format/gguf/sentencepiece_model.h"
#include "format/model/model_config.h"
#include "format/model/shard_set.h"
#include "format/model/tokenizer_embed.h"

using namespace aprfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0:
        ParseWeightIndex(text, "model.safetensors.index.json");
        break;
      case 1:
        ParseModelConfig(text, "config.json");
        break;
      case 2:
        ParseTokenizerJson(text, DefaultModelConfig(), "tokenizer.json");
        break;
      default:
        ParseSentencePieceModel(std::string(text), "tokenizer.model");
        break;
    }
  } catch (const FormatError&) {
  }
  return 0;
}
