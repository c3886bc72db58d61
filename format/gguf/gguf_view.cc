#include "format/gguf/gguf_view.h"

#include "format/error.h"
#include "format/gguf/gguf_quantize.h"

namespace aprfs {

FilePlan PlanGgufView(const ShardSet& set, const ModelTexts& texts, GgufOuttype outtype) {
  auto config_text = texts.find("config.json");
  if (config_text == texts.end()) {
    throw FormatError("config.json: missing: the GGUF view needs the model's architecture");
  }
  const GgufConfig config = ParseGgufConfig(config_text->second, "config.json");
  const bool quantize = outtype == GgufOuttype::kQ4_K_M;
  GgufTensors tensors = PlanGgufTensors(set, config, quantize ? GgufOuttype::kF16 : outtype);
  if (quantize) QuantizeQ4_K_M(config, tensors);
  if (tensors.token_rows == 0) {
    throw FormatError("model.embed_tokens.weight: missing or not 2-D: llama.cpp needs it");
  }
  GgufMetadata kv;
  AddArchitectureKeys(config, LoadableGeneralName(set.name), tensors.file_type, tensors.total_params, kv);
  AddTokenizerKeys(config, texts, tensors.token_rows, kv);
  if (quantize) ResetQuantizeKeys(tensors.file_type, kv);
  return BuildGgufPlan(kv, tensors.tensors, std::move(tensors.codecs));
}

}  // namespace aprfs
