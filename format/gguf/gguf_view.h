#pragma once

#include "format/gguf/gguf_tensors.h"
#include "format/gguf/gguf_vocab.h"
#include "format/model/shard_set.h"
#include "format/plan/file_plan.h"

namespace aprfs {

// NAME.gguf and its --outtype variants: the GGUF file llama.cpp's convert_hf_to_gguf.py would
// write for the model, as a plan (gguf-view.md): architecture keys from config.json, the
// tokenizer from tokenizer.json and tokenizer_config.json, the tensors mapped, converted and
// permuted as the converter does. Source i of the plan is set.shards[i]. Throws FormatError
// naming the file, the tensor and the rule where the converter would fail or llama.cpp refuse.
FilePlan PlanGgufView(const ShardSet& set, const ModelTexts& texts, GgufOuttype outtype);

// The small files PlanGgufView reads, when the model has them.
inline constexpr const char* kGgufModelTexts[] = {"config.json", "tokenizer.json",
                                                  "tokenizer_config.json", "tokenizer.model",
                                                  "added_tokens.json", "chat_template.jinja"};

}  // namespace aprfs
