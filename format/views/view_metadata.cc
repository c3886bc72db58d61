#include "format/views/view_metadata.h"

#include "format/views/metadata_parts.h"

namespace aprfs {
namespace {

// What both paths take from config.json.
void AddConfig(const ShardSet& set, AprMetadata& m) {
  if (!set.config) return;
  const ModelConfig& config = *set.config;
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
}

}  // namespace

AprMetadata ShardedImportMetadata(const ShardSet& set, const std::string& stem,
                                  EmbeddedTokenizer tokenizer) {
  AprMetadata m;
  m.model_type = AprenderArchitectureName(set.config ? set.config->model_type : std::nullopt);
  m.name = stem;
  AddConfig(set, m);
  AddTokenizerKeys(std::move(tokenizer), m.custom);
  return m;
}

AprMetadata SingleFileImportMetadata(const ShardSet& set, const std::string& stem,
                                     uint64_t param_count, bool tied_lm_head,
                                     const std::vector<AprTensorSpec>& tensors) {
  AprMetadata m;
  m.model_type = "Auto";
  m.name = stem;
  m.param_count = param_count;
  AddConfig(set, m);
  if (set.config) {
    m.head_dim = set.config->head_dim;
    m.num_experts = set.config->num_experts;
    m.num_experts_per_tok = set.config->num_experts_per_tok;
    m.moe_intermediate_size = set.config->moe_intermediate_size;
  }
  m.custom["tensor_shapes"] = TensorShapesJson(tensors);
  if (std::optional<std::string> text = SourceMetadataJson(set)) m.custom["source_metadata"] = *text;
  if (tied_lm_head) m.custom["tied_embeddings"] = "true";
  AddTokenizerKeys(set.tokenizer, m.custom);
  return m;
}

}  // namespace aprfs
