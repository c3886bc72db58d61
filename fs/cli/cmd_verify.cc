// `aprfs verify`: checks a model's shards against their sha256 (the Hub's LFS oids, which are
// also the HF cache's blob names) and a file of it: an APR file's structure and footer CRC, a
// GGUF or safetensors file's structure (those formats carry no checksum). The exit code is the
// verdict: 0 good, 1 something is wrong, 2 something could not be checked (not cached).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "fetch/hf_cache.h"
#include "fetch/sha256.h"
#include "fs/cli/apr_check.h"
#include "format/gguf/gguf_reader.h"
#include "fs/cli/commands.h"
#include "fs/cli/inspect_safetensors.h"
#include "fs/cli/interrupt.h"
#include "fs/cli/model_target.h"
#include "fs/cli/progress.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;

constexpr int kGood = 0, kBad = 1, kIncomplete = 2, kInterrupted = 130;

struct VerifyArgs {
  std::string target;
  bool shards_only = false;
  SourceOptions sources;
};

// One shard to hash: a local file or a complete chunk store's data file.
struct ShardCheck {
  std::string name;                     // the shard's path in the model
  std::string path;                     // what to hash; empty when not cached
  uint64_t size = 0;
  std::optional<std::string> expected;  // the reference sha256, when one exists
  std::string missing;                  // why it cannot be checked
};

std::vector<ShardCheck> ShardsOfMount(const MountedModel& mounted) {
  std::vector<ShardCheck> checks;
  const std::string cache_dir = JsonString(mounted.mount, "cache_dir");
  for (const nlohmann::json& shard : mounted.model.value("shards", nlohmann::json::array())) {
    ShardCheck check;
    check.name = JsonString(shard, "file");
    check.size = JsonCount(shard, "size");
    if (shard.contains("sha256") && shard["sha256"].is_string()) check.expected = shard["sha256"];
    if (shard.contains("local_path") && shard["local_path"].is_string()) {
      check.path = shard["local_path"];
      if (!check.expected) check.expected = HfBlobSha256(check.path);
    } else if (JsonCount(shard, "cached_bytes") < check.size) {
      check.missing = "not cached: " + HumanBytes(JsonCount(shard, "cached_bytes")) +
                      " of " + HumanBytes(check.size) + " (aprfs prefetch fetches the rest)";
    } else if (check.expected && !cache_dir.empty()) {
      check.path = cache_dir + "/chunks/" + *check.expected + "/data";
    } else {
      check.missing = "complete in the chunk cache, but the mount does not say where";
    }
    checks.push_back(check);
  }
  return checks;
}

std::vector<ShardCheck> ShardsOfModel(const BuiltModel& model) {
  std::vector<ShardCheck> checks;
  const auto& sources = model.file->sources();
  for (size_t i = 0; i < sources.size(); ++i) {
    ShardCheck check;
    check.size = sources[i]->size();
    check.name = fs::path(sources[i]->name()).lexically_relative(model.ref.dir).string();
    if (auto remote = std::dynamic_pointer_cast<RemoteFile>(sources[i])) {
      check.name = remote->blob().path;
      check.expected = remote->blob().sha256;
      if (remote->store().Complete()) {
        check.path = remote->store().dir() + "/data";
      } else {
        check.missing = "not cached: " + HumanBytes(remote->store().PresentBytes()) + " of " + HumanBytes(check.size) +
                        " (aprfs prefetch fetches the rest)";
      }
    } else {
      check.path = sources[i]->name();
      check.expected = HfBlobSha256(check.path);
    }
    checks.push_back(check);
  }
  return checks;
}

// Hashes every available shard with one progress bar; prints one line per shard. Returns the
// verdict.
int CheckShards(const std::string& label, std::vector<ShardCheck>& shards) {
  uint64_t total = 0;
  for (const ShardCheck& shard : shards) total += shard.path.empty() ? 0 : shard.size;
  std::vector<std::string> lines;
  int verdict = kGood;
  {
    Progress progress("sha256 " + label, total);
    uint64_t done = 0;
    for (ShardCheck& shard : shards) {
      if (shard.path.empty()) {
        lines.push_back("  " + shard.name + ": " + shard.missing);
        verdict = std::max(verdict, kIncomplete);
        continue;
      }
      int fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        lines.push_back("  " + shard.name + ": cannot open " + shard.path + ": " +
                        std::strerror(errno));
        verdict = kBad;
        continue;
      }
      HashCallbacks callbacks;
      callbacks.cancelled = [] { return Interrupted(); };
      callbacks.progress = [&](uint64_t hashed, uint64_t) { progress.Update(done + hashed); };
      HashResult hash = Sha256OfRange(fd, 0, shard.size, shard.path, callbacks);
      ::close(fd);
      done += shard.size;
      if (hash.cancelled) {
        progress.Finish("interrupted");
        return kInterrupted;
      }
      if (!hash.ok()) {
        lines.push_back("  " + shard.name + ": " + hash.error);
        verdict = kBad;
      } else if (!shard.expected) {
        lines.push_back("  " + shard.name + ": sha256 " + hash.hex +
                        " (no reference hash: a plain folder)");
      } else if (hash.hex != *shard.expected) {
        lines.push_back("  " + shard.name + ": MISMATCH: sha256 " + hash.hex + ", expected " +
                        *shard.expected + " (" + shard.path + ")");
        verdict = kBad;
      } else {
        lines.push_back("  " + shard.name + ": ok (sha256 " + hash.hex + ")");
      }
    }
    progress.Finish(verdict == kBad ? "FAILED" : "done");
  }
  for (const std::string& line : lines) std::cout << line << "\n";
  return verdict;
}

// The APR file's structure and footer CRC; the footer pass only when every byte is at hand.
int CheckApr(const std::string& label, const ReadAt& read_at, uint64_t size, bool all_cached) {
  AprCheck check;
  try {
    Progress progress("crc32  " + label, size);
    check = CheckAprFile(read_at, size, all_cached,
                         [&](uint64_t done, uint64_t) { progress.Update(done); });
    if (all_cached) progress.Update(size);
    progress.Finish(Interrupted() ? "interrupted" : check.valid() ? "done" : "FAILED");
  } catch (const std::exception& e) {
    if (Interrupted()) return kInterrupted;
    std::cout << "  apr: cannot read: " << e.what() << "\n";
    return kBad;
  }
  if (!check.valid()) {
    for (const std::string& problem : check.problems) std::cout << "  apr: " << problem << "\n";
    return kBad;
  }
  std::cout << "  apr: structure ok, " << check.file->index.size() << " tensors, footer "
            << (all_cached ? check.footer : "not checked (the model is not fully cached)") << "\n";
  return all_cached ? kGood : kIncomplete;
}

// A GGUF file's structure as llama.cpp's loader reads it. The format has no checksum: the data
// bytes are as good as what they were read from (a mount's shards, checked above).
int CheckGguf(const std::string& label, const ReadAt& read_at, uint64_t size) {
  GgufFile gguf;
  try {
    gguf = ReadGgufFile(read_at, size, label);
  } catch (const std::exception& e) {
    if (Interrupted()) return kInterrupted;
    std::cout << "  gguf: cannot read: " << e.what() << "\n";
    return kBad;
  }
  if (!gguf.problems.empty()) {
    for (const std::string& problem : gguf.problems) std::cout << "  gguf: " << problem << "\n";
    return kBad;
  }
  std::cout << "  gguf: structure ok, " << gguf.tensors.size() << " tensors, " << gguf.kv.size()
            << " keys, every tensor within the file (GGUF has no checksum: data not checked)\n";
  return kGood;
}

int CheckSafetensors(const std::string& label, const ReadAt& read_at, uint64_t size) {
  const SafetensorsCheck check = CheckSafetensorsFile(label, read_at, size);
  for (const std::string& warning : check.warnings) std::cout << "  safetensors: warning: " << warning << "\n";
  if (!check.errors.empty()) {
    for (const std::string& error : check.errors) std::cout << "  safetensors: " << error << "\n";
    return kBad;
  }
  std::cout << "  safetensors: structure ok, " << check.header.tensors.size()
            << " tensors (safetensors has no checksum: data not checked)\n";
  return kGood;
}

// The file's checks by its format: APR (with the footer CRC), GGUF or safetensors.
int CheckFile(const std::string& label, const ReadAt& read_at, uint64_t size, bool all_cached) {
  std::string first;
  try {
    first = read_at(0, std::min<uint64_t>(size, 16));
  } catch (const std::exception& e) {
    std::cout << "  cannot read: " << e.what() << "\n";
    return Interrupted() ? kInterrupted : kBad;
  }
  if (first.compare(0, 4, "GGUF") == 0) return CheckGguf(label, read_at, size);
  if (LooksLikeSafetensors(first)) return CheckSafetensors(label, read_at, size);
  return CheckApr(label, read_at, size, all_cached);
}

int VerifyFilePath(const std::string& label, const std::string& path, bool all_cached) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::cout << "  cannot open " << path << ": " << std::strerror(errno) << "\n";
    return kBad;
  }
  off_t size = ::lseek(fd, 0, SEEK_END);
  int verdict = CheckFile(label, FileReadAt(fd, [] { return Interrupted(); }), static_cast<uint64_t>(size), all_cached);
  ::close(fd);
  return verdict;
}

std::string VerdictText(int verdict) {
  switch (verdict) {
    case kGood: return "GOOD";
    case kBad: return "BAD";
    case kIncomplete: return "INCOMPLETE (not everything could be checked)";
    default: return "INTERRUPTED";
  }
}

int RunVerify(const VerifyArgs& args) {
  CatchInterrupts();
  ModelTarget target;
  try {
    target = ResolveTarget(args.target, args.sources);
  } catch (const std::exception& e) {
    std::cerr << "aprfs verify: " << e.what() << "\n";
    return kBad;
  }
  int verdict = kGood;
  auto fold = [&](int v) { verdict = std::max(verdict, v); };
  if (target.file) {
    std::cout << target.label << ":\n";
    fold(VerifyFilePath(target.label, *target.file, true));
  } else if (target.mounted) {
    std::cout << target.label << ":\n";
    std::vector<ShardCheck> shards = ShardsOfMount(*target.mounted);
    fold(CheckShards(target.label, shards));
    bool all_cached = true;
    for (const ShardCheck& shard : shards) all_cached = all_cached && shard.missing.empty();
    if (!args.shards_only && verdict != kInterrupted) {
      fold(VerifyFilePath(target.label, target.mounted->path, all_cached));
    }
  } else {
    target.catalog->remote.verify_when_complete = false;
    Catalog catalog(*target.catalog);
    std::vector<std::shared_ptr<const BuiltModel>> models = catalog.All();
    if (models.empty()) {
      std::cerr << "aprfs verify: " << target.label << ": no model found\n";
      return kBad;
    }
    for (const auto& model : models) {
      if (verdict == kInterrupted) break;
      std::cout << model->ref.name << " (" << model->ref.source_uri.value_or(model->ref.dir)
                << "):\n";
      if (!model->file) {
        std::cout << "  " << model->error << "\n";
        fold(kBad);
        continue;
      }
      std::vector<ShardCheck> shards = ShardsOfModel(*model);
      fold(CheckShards(model->ref.name, shards));
      bool all_cached = true;
      for (const ShardCheck& shard : shards) all_cached = all_cached && shard.missing.empty();
      if (args.shards_only || verdict == kInterrupted) continue;
      VirtualFile& file = *model->file;
      ReadAt read_at = [&](uint64_t offset, uint64_t length) {
        if (Interrupted()) throw std::runtime_error("interrupted");
        std::string out(length, '\0');
        ssize_t n = file.Read(offset, length, out.data());
        if (n < 0) throw std::runtime_error(std::string("read failed: ") + std::strerror(-n));
        out.resize(static_cast<size_t>(n));
        return out;
      };
      // Without every shard at hand only the prefix (header, metadata, index) is read.
      fold(CheckApr(model->ref.name + ".apr", read_at, file.size(), all_cached));
    }
  }
  if (Interrupted()) verdict = kInterrupted;
  std::cout << "verdict: " << VerdictText(verdict) << "\n";
  return verdict;
}

}  // namespace

void RegisterVerify(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check a model's shards (sha256) and a file of it (.apr: structure and footer "
                "CRC; .gguf, .safetensors: structure); exit code 0 good, 1 bad, 2 incomplete");
  cmd->add_option("TARGET", args->target,
                  "A mounted file (.apr, .gguf, .safetensors) or a copy of one, a folder of "
                  "models, ORG/NAME[@REVISION], or the name of a configured repo")
      ->required();
  cmd->add_flag("--shards-only", args->shards_only, "Skip the .apr structure and footer check");
  args->sources.AddTo(*cmd);
  cmd->callback([args, &exit_code] {
    SetUpLogging("warn", "");
    exit_code = RunVerify(*args);
  });
}

}  // namespace aprfs
