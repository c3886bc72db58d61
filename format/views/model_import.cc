#include "format/views/model_import.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <type_traits>
#include <utility>

#include "format/error.h"
#include "format/apr/json_spelling.h"
#include "format/views/fp8_weights.h"
#include "format/views/import_rules.h"
#include "format/views/metadata_parts.h"

namespace aprfs {
namespace {

constexpr std::string_view kLmHead = "lm_head.weight";

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

  if (std::optional<std::string> text = SourceMetadataJson(set)) m.custom["source_metadata"] = *text;
  if (tied_lm_head) m.custom["tied_embeddings"] = "true";
  AddTokenizerKeys(set.tokenizer, m.custom);
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
  Fp8Weights fp8;
  try {
    fp8 = Fp8Weights::Find(set);
  } catch (const FormatError& e) {
    throw FormatError("model " + Quote(set.name) + ", " + e.what());
  }

  ImportedModel result;
  std::vector<AprTensorSpec> tensors;
  std::vector<TensorCodec> codecs;
  size_t count = 1;  // room for a tied head
  for (const Shard& shard : set.shards) count += shard.header.tensors.size();
  tensors.reserve(count);
  bool has_lm_head = false;
  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    auto& shard = set.shards[s];
    for (uint32_t t = 0; t < shard.header.tensors.size(); ++t) {
      auto& tensor = shard.header.tensors[t];
      if (fp8.IsScale({s, t})) continue;  // consumed by the weight it scales
      std::optional<TensorCodec> dequant = fp8.DequantCodec({s, t}, tensor.shape);
      std::optional<uint8_t> code = dequant ? kAprBf16 : AprCodeFor(tensor.dtype);
      if (!code) {
        throw FormatError(where(shard, tensor.name) + "dtype " +
                          std::string(StDtypeName(tensor.dtype)) +
                          " has no APR v2 code (supported: F32, F16, BF16, F64, I32, I64, I8, "
                          "U8, BOOL, and F8_E4M3 with block scales, dequantized to BF16)");
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
      has_lm_head = has_lm_head || IsOutputHead(tensor.name);
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
      if (dequant) {
        spec.size = EncodedSize(*dequant);
        spec.codec = static_cast<uint32_t>(codecs.size());
        codecs.push_back(*dequant);
      }
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
    if (IsTokenEmbedding(tensors[i].name)) embedding = i;  // the last one wins, as in aprender
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
    AddTokenizerKeys(std::move(tokenizer), metadata.custom);  // empty when not consuming
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
    result.plan = BuildAprPlan(std::move(metadata_json), tensors, std::move(codecs));
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
