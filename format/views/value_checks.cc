#include "format/views/value_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "format/error.h"
#include "format/views/fp8_weights.h"
#include "format/views/import_rules.h"
#include "format/views/metadata_parts.h"

namespace aprfs {
namespace {

std::string Percent(uint64_t part, uint64_t whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

}  // namespace

std::vector<ScanItem> SingleFileScanItems(const ShardSet& set) {
  // The plan's own checks first (dtypes, FP8 scales): the same errors as the view's plan.
  PlanQuantizedView(set, ViewKind::kF16, set.name);  // a copy: small, single-file models
  Fp8Weights fp8 = Fp8Weights::Find(set);
  const Shard& shard = set.shards.at(0);
  std::vector<ScanItem> items;
  for (uint32_t i = 0; i < shard.header.tensors.size(); ++i) {
    const SafetensorsTensor& tensor = shard.header.tensors[i];
    if (fp8.IsScale({0, i})) continue;
    ScanItem& item = items.emplace_back();
    item.name = tensor.name;
    item.source = 0;
    item.source_offset = shard.header.data_start() + tensor.begin;
    item.codec = fp8.DequantCodec({0, i}, tensor.shape).value_or(TensorCodec{});
    if (!fp8.DequantCodec({0, i}, tensor.shape)) {
      item.codec.from = tensor.dtype == StDtype::F16    ? SourceDtype::kF16
                        : tensor.dtype == StDtype::BF16 ? SourceDtype::kBF16
                                                        : SourceDtype::kF32;
      item.codec.rows = 1;
      item.codec.cols = ElementCount(tensor.shape);
    }
  }
  std::sort(items.begin(), items.end(),
            [](const ScanItem& a, const ScanItem& b) { return a.name < b.name; });
  return items;
}

void ValueStats::Add(const float* values, size_t n, const codec::CodecKernels& kernels) {
  for (size_t i = 0; i < n; ++i) {
    const float v = values[i];
    if (std::isnan(v)) {
      ++nans;
    } else if (std::isinf(v)) {
      ++infinities;
    } else {
      ++finite;
      finite_sum += static_cast<double>(v);
      zeros += v == 0.0f;
    }
  }
  // AprQ4 codes block by block: a code of 8 is a zero (§5.3).
  uint8_t block[18];
  for (size_t at = 0; at < n; at += 32) {
    const size_t count = std::min<size_t>(32, n - at);
    kernels.apr_q4(values + at, count, block);
    for (size_t k = 0; k < count; ++k) {
      const uint8_t code = k % 2 == 0 ? block[2 + k / 2] & 0x0F : block[2 + k / 2] >> 4;
      q4_zero_codes += code == 8;
    }
  }
  elements += n;
}

SingleFileVerdict JudgeSingleFile(const std::vector<ScanItem>& items,
                                  const std::vector<ValueStats>& stats) {
  SingleFileVerdict verdict;
  const std::string rule_tail = " (aprender's single-file import checks every tensor under --quantize)";
  for (size_t i = 0; i < items.size() && !verdict.refusal; ++i) {
    const ValueStats& s = stats[i];
    const std::string& name = items[i].name;
    if (s.nans > 0) {
      verdict.refusal = "tensor " + Quote(name) + ": " + std::to_string(s.nans) + " NaN values" + rule_tail;
    } else if (s.infinities > 0) {
      verdict.refusal = "tensor " + Quote(name) + ": " + std::to_string(s.infinities) +
                        " infinite values" + rule_tail;
    } else if (s.finite > 0 && std::fabs(s.finite_sum / static_cast<double>(s.finite)) > 100.0) {
      char mean[48];
      std::snprintf(mean, sizeof mean, "%g", s.finite_sum / static_cast<double>(s.finite));
      verdict.refusal = "tensor " + Quote(name) + ": mean " + mean + " is beyond +-100" + rule_tail;
    }
  }
  bool has_embedding = false;
  for (size_t i = 0; i < items.size(); ++i) {
    has_embedding = has_embedding || IsTokenEmbedding(items[i].name);
    if (items[i].name == "lm_head.weight") {
      const ValueStats& s = stats[i];
      verdict.facts.lm_head_mostly_zero = s.elements == 0 || s.zeros * 1000 >= s.elements * 999;
    }
  }
  for (size_t i = 0; i < items.size() && !verdict.int4_refusal; ++i) {
    const ValueStats& s = stats[i];
    const std::string& name = items[i].name;
    // The rule applies to what int4 encodes: not skipped tensors, not a head replaced by the
    // embedding (whose own codes are checked as the embedding's).
    if (s.elements < 1024 || SkipsQuantization(name, s.elements)) continue;
    if (name == "lm_head.weight" && verdict.facts.lm_head_mostly_zero && has_embedding) continue;
    if (static_cast<double>(s.q4_zero_codes) / static_cast<double>(s.elements) > 0.99) {
      verdict.int4_refusal = "tensor " + Quote(name) + ": " + Percent(s.q4_zero_codes, s.elements) +
                             " of its 4-bit codes are zero, and aprender's writer refuses more "
                             "than 99 % (Q4 DENSITY VIOLATION)";
    }
  }
  return verdict;
}

}  // namespace aprfs
