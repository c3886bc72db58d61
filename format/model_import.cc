#include "format/model_import.h"

#include <map>

#include "format/error.h"
#include "format/json_spelling.h"

namespace aprfs {
namespace {

constexpr std::string_view kLmHead = "lm_head.weight";

// aprender's importer treats these as an existing output head...
bool IsLmHead(std::string_view name) { return name == kLmHead || name == "output.weight"; }

// ...and these as the token embedding it can tie the head to.
bool IsEmbedding(std::string_view name) {
  return name.find("embed_tokens.weight") != std::string_view::npos ||
         name == "token_embd.weight" || name == "wte.weight";
}

uint64_t ElementCount(const std::vector<uint64_t>& shape) {
  uint64_t count = 1;
  for (uint64_t dim : shape) count *= dim;  // validated against the byte size already
  return count;
}

std::string ShapeJson(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

template <typename Item, typename Append>
std::string ArrayJson(const std::vector<Item>& items, Append append) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    append(out, items[i]);
  }
  return out + "]";
}

void AddTokenizer(const EmbeddedTokenizer& tokenizer, std::map<std::string, std::string>& custom) {
  if (tokenizer.empty()) return;
  custom["tokenizer.vocabulary"] = ArrayJson(tokenizer.vocabulary, AppendJsonString);
  custom["tokenizer.vocab_size"] = std::to_string(tokenizer.vocabulary.size());
  if (!tokenizer.merges.empty()) {
    custom["tokenizer.merges"] = ArrayJson(tokenizer.merges, AppendJsonString);
  }
  if (!tokenizer.scores.empty()) {
    custom["tokenizer.scores"] = ArrayJson(tokenizer.scores, AppendJsonF64);
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

AprMetadata ImportMetadata(const ShardSet& set, uint64_t param_count, bool tied_lm_head,
                           const std::map<std::string, std::vector<uint64_t>>& shapes) {
  AprMetadata m;
  const ModelConfig config = set.config.value_or(DefaultModelConfig());
  m.model_type = AprenderArchitectureName(config.model_type);
  m.name = set.name;
  m.source = set.source;
  m.original_format = "safetensors";
  m.param_count = param_count;
  m.architecture = config.model_type;
  m.hf_architecture = config.hf_architecture;
  m.hf_model_type = config.model_type;
  m.hidden_size = config.hidden_size;
  m.num_layers = config.num_layers;
  m.num_heads = config.num_heads;
  m.num_kv_heads = config.num_kv_heads;
  m.vocab_size = config.vocab_size;
  m.intermediate_size = config.intermediate_size;
  m.max_position_embeddings = config.max_position_embeddings;
  m.rope_theta = config.rope_theta;
  m.rope_type = config.rope_type;
  m.rms_norm_eps = config.rms_norm_eps;
  m.head_dim = config.head_dim;
  m.num_experts = config.num_experts;
  m.num_experts_per_tok = config.num_experts_per_tok;
  m.moe_intermediate_size = config.moe_intermediate_size;

  std::string tensor_shapes = "{";
  for (const auto& [name, shape] : shapes) {
    if (tensor_shapes.size() > 1) tensor_shapes += ',';
    AppendJsonString(tensor_shapes, name);
    tensor_shapes += ':';
    tensor_shapes += ShapeJson(shape);
  }
  m.custom["tensor_shapes"] = tensor_shapes + "}";

  std::map<std::string, std::string> source_metadata;  // first shard that sets a key wins
  for (const Shard& shard : set.shards) source_metadata.insert(shard.header.metadata.begin(),
                                                               shard.header.metadata.end());
  if (!source_metadata.empty()) {
    std::string text = "{";
    for (const auto& [key, value] : source_metadata) {
      if (text.size() > 1) text += ',';
      AppendJsonString(text, key);
      text += ':';
      AppendJsonString(text, value);
    }
    m.custom["source_metadata"] = text + "}";
  }
  if (tied_lm_head) m.custom["tied_embeddings"] = "true";
  AddTokenizer(set.tokenizer, m.custom);
  return m;
}

ImportedModel ImportShardSet(const ShardSet& set) {
  auto where = [&](const Shard& shard, const std::string& tensor) {
    return "model " + Quote(set.name) + ", shard " + Quote(shard.file) + ", tensor " + Quote(tensor) +
           ": ";
  };
  try {
    CheckShardSet(set);
  } catch (const FormatError& e) {
    throw FormatError("model " + Quote(set.name) + ": " + e.what());
  }

  ImportedModel result;
  std::vector<AprTensorSpec> tensors;
  std::map<std::string, std::vector<uint64_t>> shapes;
  const AprTensorSpec* embedding = nullptr;
  bool has_lm_head = false;
  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    const Shard& shard = set.shards[s];
    for (const SafetensorsTensor& tensor : shard.header.tensors) {
      std::optional<uint8_t> code = AprCodeFor(tensor.dtype);
      if (!code) {
        throw FormatError(where(shard, tensor.name) + "dtype " +
                          std::string(StDtypeName(tensor.dtype)) +
                          " has no APR v2 code (supported: F32, F16, BF16, F64, I32, I64, I8, "
                          "U8, BOOL)");
      }
      if (tensor.name.size() > kAprMaxTensorName) {
        throw FormatError(where(shard, tensor.name) + "name is " +
                          std::to_string(tensor.name.size()) +
                          " bytes; APR v2 names are at most 256 bytes");
      }
      if (tensor.shape.size() > kAprMaxDims) {
        throw FormatError(where(shard, tensor.name) + std::to_string(tensor.shape.size()) +
                          " dimensions; APR v2 stores at most 8");
      }
      tensors.push_back({tensor.name, *code, tensor.shape, tensor.size(), s,
                         shard.header.data_start() + tensor.begin, std::nullopt});
      shapes[tensor.name] = tensor.shape;
      result.param_count += ElementCount(tensor.shape);
      has_lm_head = has_lm_head || IsLmHead(tensor.name);
    }
  }
  for (const AprTensorSpec& tensor : tensors) {
    if (IsEmbedding(tensor.name)) embedding = &tensor;  // the last one wins, as in aprender
  }
  bool ties = !set.config || set.config->tie_word_embeddings;
  if (!has_lm_head && embedding && ties) {
    AprTensorSpec head = *embedding;
    head.alias_of = embedding->name;
    head.name = std::string(kLmHead);
    shapes[head.name] = head.shape;
    result.param_count += ElementCount(head.shape);
    result.tied_lm_head = true;
    tensors.push_back(std::move(head));
  }

  AprMetadata metadata = ImportMetadata(set, result.param_count, result.tied_lm_head, shapes);
  try {
    result.plan = BuildAprPlan(SerializeAprMetadata(metadata), tensors);
  } catch (const FormatError& e) {
    throw FormatError("model " + Quote(set.name) + ": " + e.what());
  }
  return result;
}

}  // namespace aprfs
