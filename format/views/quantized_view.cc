#include "format/views/quantized_view.h"

#include <algorithm>
#include <utility>

#include "format/apr/apr_layout.h"
#include "format/apr/apr_metadata.h"
#include "format/error.h"
#include "format/views/fp8_weights.h"
#include "format/views/metadata_parts.h"
#include "format/views/view_metadata.h"

namespace aprfs {
namespace {

constexpr std::string_view kLmHead = "lm_head.weight";

// One source tensor as the importer sees it, after FP8 dequantization.
struct SourceTensor {
  std::vector<uint64_t> shape;
  uint64_t size = 0;  // source bytes
  uint32_t source = 0;
  uint64_t source_offset = 0;
  SourceDtype from = SourceDtype::kF32;
  std::optional<TensorCodec> dequant;  // FP8 weights: how the BF16 values are made
};

// The dtypes aprender can convert to f32 (§3.1), FP8 weights with scales aside.
SourceTensor Resolve(const ShardSet& set, const Fp8Weights& fp8, TensorRef ref) {
  const Shard& shard = set.shards[ref.shard];
  const SafetensorsTensor& tensor = shard.header.tensors[ref.index];
  SourceTensor resolved;
  resolved.size = tensor.size();
  resolved.source = ref.shard;
  resolved.source_offset = shard.header.data_start() + tensor.begin;
  resolved.dequant = fp8.DequantCodec(ref, tensor.shape);
  if (resolved.dequant) {
    resolved.from = SourceDtype::kE4M3;
  } else if (tensor.dtype == StDtype::F32) {
    resolved.from = SourceDtype::kF32;
  } else if (tensor.dtype == StDtype::F16) {
    resolved.from = SourceDtype::kF16;
  } else if (tensor.dtype == StDtype::BF16) {
    resolved.from = SourceDtype::kBF16;
  } else {
    throw FormatError("shard " + Quote(shard.file) + ", tensor " + Quote(tensor.name) + ": dtype " +
                      std::string(StDtypeName(tensor.dtype)) +
                      " cannot be converted to f32, and aprender's import converts every tensor "
                      "of a quantized import (it reads F32, F16 and BF16)");
  }
  resolved.shape = tensor.shape;
  return resolved;
}

// The encoding that writes a dtype code from f32 values.
Encoding EncodingOf(uint8_t code) {
  switch (code) {
    case kAprF16: return Encoding::kF16;
    case kAprBf16: return Encoding::kBF16;
    case kAprQ4K: return Encoding::kQ4K;
    case kAprQ8: return Encoding::kAprQ8;
    case kAprQ4: return Encoding::kAprQ4;
    default: return Encoding::kF32;
  }
}

// Adds `name` (with the source's shape and values) to the view as the path's dispatch says.
// `from_f32_values`: the importer hands this tensor over as f32 values whatever its source
// dtype (the sharded path's added lm_head), so nothing of it passes through.
void Add(std::vector<AprTensorSpec>& tensors, std::vector<TensorCodec>& codecs, ViewKind view,
         ImportPath path, std::string name, const SourceTensor& source,
         bool from_f32_values = false) {
  const std::vector<uint64_t>& shape = source.shape;
  const uint64_t elements = ElementCount(shape);
  const SourceDtype seen = from_f32_values ? SourceDtype::kF32
                           : source.dequant ? SourceDtype::kBF16
                                            : source.from;
  TensorDispatch dispatch = Dispatch(view, path, seen, name, elements);
  AprTensorSpec& spec = tensors.emplace_back();
  spec.name = std::move(name);
  spec.shape = shape;
  spec.dtype = dispatch.dtype;
  spec.source = source.source;
  spec.source_offset = source.source_offset;
  // Bytes pass through only into their own dtype; otherwise (an FP8 weight's BF16, an added
  // head's F16) they are computed.
  const bool own_dtype = (dispatch.dtype == kAprF32 && source.from == SourceDtype::kF32) ||
                         (dispatch.dtype == kAprF16 && source.from == SourceDtype::kF16) ||
                         (dispatch.dtype == kAprBf16 && source.from == SourceDtype::kBF16);
  if (!dispatch.encoding && !own_dtype) dispatch.encoding = EncodingOf(dispatch.dtype);
  if (!dispatch.encoding) {
    spec.size = source.size;
    return;
  }
  TensorCodec codec = source.dequant.value_or(TensorCodec{});
  codec.from = source.from;
  codec.to = *dispatch.encoding;
  if (shape.size() == 2) {
    codec.rows = shape[0];
    codec.cols = shape[1];
  } else {
    codec.rows = 1;
    codec.cols = elements;
  }
  codec.row_padded = codec.to == Encoding::kQ4K && shape.size() == 2;
  spec.size = EncodedSize(codec);
  spec.codec = static_cast<uint32_t>(codecs.size());
  codecs.push_back(codec);
}

// aprender renames or splits the tensors of these architectures on import (fused QKV of GPT-2
// and GPT-NeoX); their views are not offered rather than served with other bytes.
void CheckNamesKept(const ShardSet& set) {
  if (!set.config) return;
  const std::string arch = AprenderArchitectureName(set.config->model_type);
  if (arch == "Gpt2" || arch == "GptNeoX") {
    throw FormatError("config.json: model_type " + Quote(*set.config->model_type) +
                      ": aprender splits this architecture's fused QKV tensors on import; its "
                      "quantized views are not offered");
  }
}

// The tensors of each shard in name order, as the streaming importer walks them (§2.4).
std::vector<uint32_t> NameOrder(const Shard& shard) {
  std::vector<uint32_t> order(shard.header.tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return shard.header.tensors[a].name < shard.header.tensors[b].name;
  });
  return order;
}

// Consumes `set`'s tensor lists (each freed once walked) and tokenizer: for a model of 100k
// tensors the difference between holding its names once or twice.
QuantizedView PlanSharded(ShardSet& set, const Fp8Weights& fp8, ViewKind view,
                          const std::string& stem) {
  std::vector<AprTensorSpec> tensors;
  std::vector<TensorCodec> codecs;
  size_t count = 1;
  for (const Shard& shard : set.shards) count += shard.header.tensors.size();
  tensors.reserve(count);
  bool has_head = false;
  std::optional<SourceTensor> embedding;  // the last one met, as aprender's loop keeps it
  for (uint32_t s = 0; s < set.shards.size(); ++s) {
    auto& shard_tensors = set.shards[s].header.tensors;
    for (uint32_t i : NameOrder(set.shards[s])) {
      SafetensorsTensor& tensor = shard_tensors[i];
      if (tensor.name.starts_with("__") || fp8.IsScale({s, i})) continue;
      SourceTensor source = Resolve(set, fp8, {s, i});
      has_head = has_head || IsOutputHead(tensor.name);
      if (IsTokenEmbedding(tensor.name)) embedding = source;
      Add(tensors, codecs, view, ImportPath::kSharded, std::move(tensor.name), source);
    }
    std::vector<SafetensorsTensor>().swap(shard_tensors);  // `= {}` would keep the capacity
  }
  if (!has_head && embedding) {
    Add(tensors, codecs, view, ImportPath::kSharded, std::string(kLmHead), *embedding,
        /*from_f32_values=*/true);
  }
  AprMetadata metadata = ShardedImportMetadata(set, stem, std::exchange(set.tokenizer, {}));
  std::string json;
  json.reserve(kAprHeaderSize + AlignUp64(AprMetadataSizeBound(metadata)) +
               AlignUp64(AprIndexSize(tensors)));
  AppendAprMetadata(json, std::move(metadata));
  QuantizedView result;
  result.path = ImportPath::kSharded;
  result.plan = BuildAprPlan(std::move(json), tensors, std::move(codecs));
  return result;
}

QuantizedView PlanSingleFile(const ShardSet& set, const Fp8Weights& fp8, ViewKind view,
                             const std::string& stem, const SingleFileFacts& facts) {
  // Every tensor by name (the in-memory importer's BTreeMap), with the tied head resolved as
  // resolve_f32_tied_embeddings does (§3.4).
  std::vector<std::pair<std::string, SourceTensor>> by_name;
  const Shard& shard = set.shards[0];
  for (uint32_t i = 0; i < shard.header.tensors.size(); ++i) {
    if (fp8.IsScale({0, i})) continue;
    by_name.emplace_back(shard.header.tensors[i].name, Resolve(set, fp8, {0, i}));
  }
  std::sort(by_name.begin(), by_name.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  auto head = std::find_if(by_name.begin(), by_name.end(),
                           [](const auto& entry) { return entry.first == kLmHead; });
  const bool has_head = head != by_name.end();
  const bool head_is_zero =
      has_head && (ElementCount(head->second.shape) == 0 || facts.lm_head_mostly_zero);
  if (!has_head || head_is_zero) {
    auto embedding = std::find_if(by_name.begin(), by_name.end(),
                                  [](const auto& entry) { return IsTokenEmbedding(entry.first); });
    if (embedding != by_name.end()) {
      SourceTensor copy = embedding->second;
      if (has_head) {
        head->second = copy;
      } else {
        by_name.emplace_back(std::string(kLmHead), copy);
        std::sort(by_name.begin(), by_name.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
      }
    }
  }
  const bool tied = (!has_head || head_is_zero) &&
                    std::any_of(by_name.begin(), by_name.end(),
                                [](const auto& entry) { return entry.first == kLmHead; });

  std::vector<AprTensorSpec> tensors;
  std::vector<TensorCodec> codecs;
  uint64_t param_count = 0;
  for (const auto& [name, source] : by_name) {
    param_count += ElementCount(source.shape);
    Add(tensors, codecs, view, ImportPath::kSingleFile, name, source);
  }
  QuantizedView result;
  result.path = ImportPath::kSingleFile;
  result.plan = BuildAprPlan(
      SerializeAprMetadata(SingleFileImportMetadata(set, stem, param_count, tied, tensors)),
      tensors, std::move(codecs));
  return result;
}

}  // namespace

ImportPath ImportPathOf(const ShardSet& set) {
  return !set.index && set.shards.size() == 1 ? ImportPath::kSingleFile : ImportPath::kSharded;
}

QuantizedView PlanQuantizedView(ShardSet set, ViewKind view, const std::string& stem,
                                const SingleFileFacts& facts) {
  try {
    CheckShardSet(set);
    CheckNamesKept(set);
    const ImportPath path = ImportPathOf(set);
    set.index.reset();  // checked, and never read again: 100k names, megabytes
    Fp8Weights fp8 = Fp8Weights::Find(set);
    return path == ImportPath::kSingleFile ? PlanSingleFile(set, fp8, view, stem, facts)
                                           : PlanSharded(set, fp8, view, stem);
  } catch (const FormatError& e) {
    throw FormatError("model " + Quote(set.name) + ", view " + std::string(ViewName(view)) + ": " +
                      e.what());
  }
}

}  // namespace aprfs
