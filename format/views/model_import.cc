#include "format/views/model_import.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <type_traits>
#include <utility>

#include "format/error.h"
#include "format/apr/json_spelling.h"

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

void AppendShapeJson(std::string& out, const std::vector<uint64_t>& shape) {
  out += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    char digits[24];
    out.append(digits, std::to_chars(digits, digits + sizeof digits, shape[i]).ptr);
  }
  out += ']';
}

// {"name":[dims],...} in name order; of a name given twice, the last. Sized exactly before it
// is written: for a large model it is megabytes, and doubling would hold twice that.
std::string TensorShapesJson(const std::vector<AprTensorSpec>& tensors) {
  std::vector<uint32_t> order(tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; });
  auto last_of_name = [&](size_t k) {
    return k + 1 == order.size() || tensors[order[k + 1]].name != tensors[order[k]].name;
  };
  std::string text;
  auto write_all = [&](std::string& out) {
    out += '{';
    bool first = true;
    for (size_t k = 0; k < order.size(); ++k) {
      if (!last_of_name(k)) continue;
      if (!first) out += ',';
      first = false;
      AppendJsonString(out, tensors[order[k]].name);
      out += ':';
      AppendShapeJson(out, tensors[order[k]].shape);
    }
    out += '}';
  };
  size_t size = 0;
  {
    std::string scratch;  // one entry at a time, to count
    for (size_t k = 0; k < order.size(); ++k) {
      if (!last_of_name(k)) continue;
      scratch.clear();
      AppendJsonString(scratch, tensors[order[k]].name);
      AppendShapeJson(scratch, tensors[order[k]].shape);
      size += scratch.size() + 2;  // ':' and ','
    }
  }
  text.reserve(size + 2);
  write_all(text);
  return text;
}

template <typename Item, typename Append>
std::string ArrayJson(const std::vector<Item>& items, Append append) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    append(out, items[i]);
  }
  out += ']';
  return out;
}

// Spells the tokenizer into `custom`; a mutable `tokenizer` loses each list once it is spelled
// (a 128k vocabulary and its JSON are megabytes each).
template <typename Tokenizer>
void AddTokenizer(Tokenizer& tokenizer, std::map<std::string, std::string>& custom) {
  constexpr bool consume = !std::is_const_v<Tokenizer>;
  auto release = [](auto& list) {
    if constexpr (consume) std::remove_reference_t<decltype(list)>().swap(list);
  };
  if (tokenizer.empty()) return;
  custom["tokenizer.vocab_size"] = std::to_string(tokenizer.vocabulary.size());
  custom["tokenizer.vocabulary"] = ArrayJson(tokenizer.vocabulary, AppendJsonString);
  release(tokenizer.vocabulary);
  if (!tokenizer.merges.empty()) {
    custom["tokenizer.merges"] = ArrayJson(tokenizer.merges, AppendJsonString);
    release(tokenizer.merges);
  }
  if (!tokenizer.scores.empty()) {
    custom["tokenizer.scores"] = ArrayJson(tokenizer.scores, AppendJsonF64);
    release(tokenizer.scores);
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
                           const std::vector<AprTensorSpec>& tensors) {
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

  m.custom["tensor_shapes"] = TensorShapesJson(tensors);

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

namespace {

// ImportShardSet, copying the names and shapes out of a const `set`, or moving them out of a
// mutable one: then each shard's tensor list and the index are dropped once used.
template <typename Set>
ImportedModel Import(Set& set, const std::function<void()>& released) {
  constexpr bool consume = !std::is_const_v<Set>;
  auto where = [&](const Shard& shard, const std::string& tensor) {
    return "model " + Quote(set.name) + ", shard " + Quote(shard.file) + ", tensor " + Quote(tensor) +
           ": ";
  };
  try {
    CheckShardSet(set);
  } catch (const FormatError& e) {
    throw FormatError("model " + Quote(set.name) + ": " + e.what());
  }
  if constexpr (consume) set.index.reset();

  ImportedModel result;
  std::vector<AprTensorSpec> tensors;
  size_t count = 1;  // room for a tied head
  for (const Shard& shard : set.shards) count += shard.header.tensors.size();
  tensors.reserve(count);
  bool has_lm_head = false;
  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    auto& shard = set.shards[s];
    for (auto& tensor : shard.header.tensors) {
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
      result.param_count += ElementCount(tensor.shape);
      has_lm_head = has_lm_head || IsLmHead(tensor.name);
      AprTensorSpec& spec = tensors.emplace_back();
      if constexpr (consume) {
        spec.name = std::move(tensor.name);
        spec.shape = std::move(tensor.shape);
      } else {
        spec.name = tensor.name;
        spec.shape = tensor.shape;
      }
      spec.dtype = *code;
      spec.size = tensor.size();
      spec.source = s;
      spec.source_offset = shard.header.data_start() + tensor.begin;
    }
    // Not `= {}`: that assigns an empty initializer_list and keeps the capacity (7 MB for
    // DeepSeek-V3's 163 shards).
    if constexpr (consume) std::vector<SafetensorsTensor>().swap(shard.header.tensors);
  }
  if constexpr (consume) {
    if (released) released();  // the index and the shards' tensor lists
  }
  std::optional<uint32_t> embedding;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (IsEmbedding(tensors[i].name)) embedding = i;  // the last one wins, as in aprender
  }
  bool ties = !set.config || set.config->tie_word_embeddings;
  if (!has_lm_head && embedding && ties) {
    AprTensorSpec head = tensors[*embedding];
    head.alias_of = *embedding;
    head.name = std::string(kLmHead);
    result.param_count += ElementCount(head.shape);
    result.tied_lm_head = true;
    tensors.push_back(std::move(head));
  }

  std::string metadata_json;
  {
    // Consuming, the tokenizer is taken out first and spelled by the version that frees it.
    EmbeddedTokenizer tokenizer;
    if constexpr (consume) tokenizer = std::exchange(set.tokenizer, {});
    AprMetadata metadata = ImportMetadata(set, result.param_count, result.tied_lm_head, tensors);
    AddTokenizer(tokenizer, metadata.custom);  // empty (a no-op) when not consuming
    if (released) released();  // the tokenizer
    // Room for the header and the index behind the metadata: the plan is built in this buffer
    // (pages reserved but not written cost nothing).
    metadata_json.reserve(kAprHeaderSize + AlignUp64(AprMetadataSizeBound(metadata)) +
                          AlignUp64(AprIndexSize(tensors)));
    // Each part (megabytes of tensor_shapes and vocabulary for a large model) is freed as soon
    // as it is written.
    AppendAprMetadata(metadata_json, std::move(metadata));
  }
  try {
    result.plan = BuildAprPlan(std::move(metadata_json), tensors);
  } catch (const FormatError& e) {
    throw FormatError("model " + Quote(set.name) + ": " + e.what());
  }
  return result;
}

}  // namespace

ImportedModel ImportShardSet(const ShardSet& set) { return Import(set, nullptr); }

ImportedModel ImportShardSet(ShardSet&& set, const std::function<void()>& released) {
  return Import(set, released);
}

}  // namespace aprfs
