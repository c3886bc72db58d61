#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fetch/byte_source.h"
#include "fetch/chunk_cache.h"
#include "format/model/shard_set.h"
#include "format/views/value_checks.h"
#include "format/views/view_kind.h"
#include "fs/read_counters.h"
#include "fs/views/view_cache.h"
#include "fs/virtual_file.h"

namespace aprfs {

// What scans of single-file models found, by the models' content identity: kept in memory and,
// given a folder, on disk, so the values of a model version are checked once.
class VerdictBook {
 public:
  explicit VerdictBook(std::optional<std::string> dir = std::nullopt);
  std::optional<SingleFileVerdict> Find(const std::string& key);
  void Put(const std::string& key, const SingleFileVerdict& verdict);

 private:
  std::optional<std::string> dir_;
  std::mutex mu_;
  std::map<std::string, SingleFileVerdict> known_;
};

// The counters of each view of a model.
using ViewCounters = std::array<std::shared_ptr<ReadCounters>, kViewCount>;

// The files one model is offered as: its .apr (built with the model) and its computed views,
// each planned the first time it is asked for, from the same sources.
class ModelViews {
 public:
  // `read_text` reads a small file of the model by path (nullopt when absent).
  ModelViews(std::string model_name, std::vector<std::shared_ptr<ByteSource>> sources,
             std::function<ShardSet()> reload,
             std::function<std::optional<std::string>(const std::string&)> read_text,
             std::shared_ptr<VirtualFile> plain, ViewCounters counters,
             ComputedCache computed_cache, VerdictBook* verdicts);

  // The view's file, planned on first use; null when the model has no such view (Error then
  // says why: a dtype aprender cannot convert, values it refuses...).
  std::shared_ptr<VirtualFile> Get(ViewKind view);
  // The view's file if it was planned already (status pages never plan).
  std::shared_ptr<VirtualFile> Planned(ViewKind view) const;
  std::string Error(ViewKind view) const;
  // A single-file model whose view checks have not run yet (the planned size assumes the
  // common case: an lm_head.weight that is not all zeros).
  bool Unchecked(ViewKind view) const;
  // A check of the values found them other than planned (an all-zero lm_head.weight): the
  // model must be planned again, under new inodes.
  bool Stale() const { return stale_; }

 private:
  struct Slot {
    bool planned = false;
    std::shared_ptr<VirtualFile> file;
    std::string error;
  };
  // Plans the view; on failure sets `error`.
  std::shared_ptr<VirtualFile> Plan(ViewKind view, std::string& error);
  // A GGUF view's plan, from the shards' headers and the model's small files.
  FilePlan PlanGguf(const ShardSet& set, ViewKind view);
  // The single-file checks, before a quantized view of such a model serves a byte.
  int CheckValues(ViewKind view, bool planned_zero_head);
  std::optional<SingleFileVerdict> Verdict();  // scans on first use; nullopt when it failed

  const std::string name_;
  const std::vector<std::shared_ptr<ByteSource>> sources_;
  const std::function<ShardSet()> reload_;
  const std::function<std::optional<std::string>(const std::string&)> read_text_;
  const ViewCounters counters_;
  const ComputedCache computed_cache_;
  VerdictBook* const verdicts_;
  std::string identity_;  // the sources' identities: the key of verdicts

  std::array<std::mutex, kViewCount> plan_mu_;  // one plan of a view at a time
  mutable std::mutex mu_;                        // the slots' fields: held briefly
  std::array<Slot, kViewCount> slots_;
  bool single_file_ = false;
  std::mutex scan_mu_;  // one scan at a time
  std::atomic<bool> stale_{false};
};

}  // namespace aprfs
