#include "fs/views/model_views.h"

#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "fetch/sha256.h"
#include "format/error.h"
#include "format/gguf/gguf_view.h"
#include "format/views/merged_safetensors.h"
#include "format/views/quantized_view.h"
#include "fs/views/value_scan.h"
#include "fs/views/view_cache.h"

namespace aprfs {
namespace {

nlohmann::json ToJson(const SingleFileVerdict& verdict) {
  nlohmann::json json;
  json["lm_head_mostly_zero"] = verdict.facts.lm_head_mostly_zero;
  if (verdict.refusal) json["refusal"] = *verdict.refusal;
  if (verdict.int4_refusal) json["int4_refusal"] = *verdict.int4_refusal;
  return json;
}

std::optional<SingleFileVerdict> FromJson(const nlohmann::json& json) {
  if (!json.is_object() || !json.contains("lm_head_mostly_zero")) return std::nullopt;
  SingleFileVerdict verdict;
  verdict.facts.lm_head_mostly_zero = json.value("lm_head_mostly_zero", false);
  if (json.contains("refusal")) verdict.refusal = json["refusal"].get<std::string>();
  if (json.contains("int4_refusal")) verdict.int4_refusal = json["int4_refusal"].get<std::string>();
  return verdict;
}

}  // namespace

VerdictBook::VerdictBook(std::optional<std::string> dir) : dir_(std::move(dir)) {}

std::optional<SingleFileVerdict> VerdictBook::Find(const std::string& key) {
  std::lock_guard lock(mu_);
  auto known = known_.find(key);
  if (known != known_.end()) return known->second;
  if (!dir_) return std::nullopt;
  std::ifstream in(*dir_ + "/" + key + ".json");
  if (!in) return std::nullopt;
  try {
    std::optional<SingleFileVerdict> verdict = FromJson(nlohmann::json::parse(in));
    if (verdict) known_[key] = *verdict;
    return verdict;
  } catch (const std::exception&) {
    return std::nullopt;  // a torn or foreign file: scan again
  }
}

void VerdictBook::Put(const std::string& key, const SingleFileVerdict& verdict) {
  std::lock_guard lock(mu_);
  known_[key] = verdict;
  if (!dir_) return;
  std::error_code ec;
  std::filesystem::create_directories(*dir_, ec);
  // Written aside and renamed: a reader never sees half a verdict.
  const std::string path = *dir_ + "/" + key + ".json";
  const std::string temp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temp);
    out << ToJson(verdict).dump();
    if (!out.flush()) {
      std::filesystem::remove(temp, ec);
      return;
    }
  }
  std::filesystem::rename(temp, path, ec);
}

ModelViews::ModelViews(std::string model_name, std::vector<std::shared_ptr<ByteSource>> sources,
                       std::function<ShardSet()> reload,
                       std::function<std::optional<std::string>(const std::string&)> read_text,
                       std::shared_ptr<VirtualFile> plain, ViewCounters counters,
                       ComputedCache computed_cache, VerdictBook* verdicts)
    : name_(std::move(model_name)),
      sources_(std::move(sources)),
      reload_(std::move(reload)),
      read_text_(std::move(read_text)),
      counters_(std::move(counters)),
      computed_cache_(computed_cache),
      verdicts_(verdicts) {
  std::string identity;
  for (const auto& source : sources_) identity += source->identity() + "\n";
  identity_ = "single-file-" + Sha256Hex(identity).substr(0, 32);
  Slot& apr = slots_[ViewIndex(ViewKind::kApr)];
  apr.planned = true;
  apr.file = std::move(plain);
}

std::shared_ptr<VirtualFile> ModelViews::Get(ViewKind view) {
  // Planning takes a while (headers again, a big index): status pages asking meanwhile must
  // not wait, so the slot's lock is only held to read or publish the result.
  std::lock_guard planning(plan_mu_[ViewIndex(view)]);
  {
    std::lock_guard lock(mu_);
    const Slot& slot = slots_[ViewIndex(view)];
    if (slot.planned) return slot.file;
  }
  std::string error;
  std::shared_ptr<VirtualFile> file = Plan(view, error);
  std::lock_guard lock(mu_);
  Slot& slot = slots_[ViewIndex(view)];
  slot.planned = true;
  slot.file = file;
  slot.error = error;
  return file;
}

std::shared_ptr<VirtualFile> ModelViews::Planned(ViewKind view) const {
  std::lock_guard lock(mu_);
  return slots_[ViewIndex(view)].file;
}

std::string ModelViews::Error(ViewKind view) const {
  std::lock_guard lock(mu_);
  return slots_[ViewIndex(view)].error;
}

bool ModelViews::Unchecked(ViewKind view) const {
  if (view == ViewKind::kApr || !IsAprView(view) || !verdicts_) return false;
  {
    std::lock_guard lock(mu_);
    if (!single_file_) return false;
  }
  return !verdicts_->Find(identity_);
}

std::shared_ptr<VirtualFile> ModelViews::Plan(ViewKind view, std::string& error) {
  const std::string file_name = ViewFileName(name_, view);
  try {
    ShardSet set = reload_();
    if (!IsAprView(view)) {  // other formats: nothing of aprender's to check
      FilePlan plan = view == ViewKind::kSafetensors ? PlanMergedSafetensors(set)
                                                     : PlanGguf(set, view);
      spdlog::info("{}: {} tensors, {} bytes", file_name, plan.tensor_count, plan.total_size);
      ComputeSettings compute = ComputedStorage(plan, sources_, view, computed_cache_, file_name);
      return std::make_shared<VirtualFile>(file_name, std::move(plan), sources_,
                                           counters_[ViewIndex(view)], std::move(compute));
    }
    {
      std::lock_guard lock(mu_);
      single_file_ = ImportPathOf(set) == ImportPath::kSingleFile;
    }
    SingleFileFacts facts;
    std::optional<SingleFileVerdict> verdict;
    if (ImportPathOf(set) == ImportPath::kSingleFile && verdicts_) verdict = verdicts_->Find(identity_);
    if (verdict) {
      if (verdict->refusal) throw FormatError(*verdict->refusal);
      if (view == ViewKind::kInt4 && verdict->int4_refusal) throw FormatError(*verdict->int4_refusal);
      facts = verdict->facts;
    }
    QuantizedView planned = PlanQuantizedView(std::move(set), view, ViewStem(name_, view), facts);
    malloc_trim(0);  // the headers' copy: megabytes for a large model
    ComputeSettings compute = ComputedStorage(planned.plan, sources_, view, computed_cache_, file_name);
    if (planned.path == ImportPath::kSingleFile) {
      // Checked before the first byte is served: aprender would refuse some models outright.
      const bool planned_zero_head = facts.lm_head_mostly_zero;
      compute.prepare = [this, view, planned_zero_head] { return CheckValues(view, planned_zero_head); };
    }
    spdlog::info("{}: {} tensors, {} bytes", file_name, planned.plan.tensor_count,
                 planned.plan.total_size);
    return std::make_shared<VirtualFile>(file_name, std::move(planned.plan), sources_,
                                         counters_[ViewIndex(view)], std::move(compute));
  } catch (const std::exception& e) {
    error = e.what();
    spdlog::warn("{}: not offered: {}", file_name, error);
    malloc_trim(0);
    return nullptr;
  }
}

FilePlan ModelViews::PlanGguf(const ShardSet& set, ViewKind view) {
  ModelTexts texts;
  for (const char* name : kGgufModelTexts) {
    if (std::optional<std::string> text = read_text_ ? read_text_(name) : std::nullopt) {
      texts[name] = std::move(*text);
    }
  }
  const GgufOuttype outtype = view == ViewKind::kGgufF16    ? GgufOuttype::kF16
                              : view == ViewKind::kGgufBf16 ? GgufOuttype::kBF16
                              : view == ViewKind::kGgufF32  ? GgufOuttype::kF32
                              : view == ViewKind::kGgufQ8_0 ? GgufOuttype::kQ8_0
                              : view == ViewKind::kGgufQ4_K_M ? GgufOuttype::kQ4_K_M
                                                            : GgufOuttype::kAuto;
  return PlanGgufView(set, texts, outtype);
}

std::optional<SingleFileVerdict> ModelViews::Verdict() {
  std::lock_guard lock(scan_mu_);
  if (std::optional<SingleFileVerdict> known = verdicts_ ? verdicts_->Find(identity_) : std::nullopt) {
    return known;
  }
  std::vector<ScanItem> items = SingleFileScanItems(reload_());
  std::vector<ValueStats> stats;
  spdlog::info("{}: checking the values of {} tensors, as aprender's import does", name_, items.size());
  if (int err = ScanValues(items, sources_, stats)) {
    spdlog::error("{}: the value checks could not read the model: {}", name_, std::strerror(err));
    return std::nullopt;
  }
  SingleFileVerdict verdict = JudgeSingleFile(items, stats);
  if (verdicts_) verdicts_->Put(identity_, verdict);
  return verdict;
}

int ModelViews::CheckValues(ViewKind view, bool planned_zero_head) {
  const std::string file_name = ViewFileName(name_, view);
  std::optional<SingleFileVerdict> verdict;
  try {
    verdict = Verdict();
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", file_name, e.what());
  }
  if (!verdict) return EIO;
  std::optional<std::string> refusal = verdict->refusal;
  if (!refusal && view == ViewKind::kInt4) refusal = verdict->int4_refusal;
  if (refusal) {
    spdlog::error("{}: aprender's import refuses this model: {}", file_name, *refusal);
    std::lock_guard lock(mu_);
    slots_[ViewIndex(view)].error = *refusal;
    stale_ = true;  // planned again, the view is not offered
    return EIO;
  }
  if (verdict->facts.lm_head_mostly_zero != planned_zero_head) {
    spdlog::warn("{}: lm_head.weight is all zeros, so aprender ties it to the embedding; the "
                 "model is planned again (look the file up again)", file_name);
    stale_ = true;
    return ESTALE;
  }
  return 0;
}

}  // namespace aprfs
