// `aprfs prefetch`: fetches every chunk of a remote model into the shared chunk cache ahead of a
// job, then verifies each shard's sha256 and publishes it into the HF cache. Runs in its own
// process next to any mount: the chunk store's claims keep both from fetching a chunk twice,
// and an interrupted run resumes from the chunks already present.
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "fs/cli/commands.h"
#include "fs/cli/interrupt.h"
#include "fs/cli/model_target.h"
#include "fs/cli/prefetch_view.h"
#include "fs/cli/progress.h"

namespace aprfs {
namespace {

struct PrefetchArgs {
  std::string target;
  SourceOptions sources;
};

uint64_t PresentBytes(const std::vector<std::shared_ptr<RemoteFile>>& files) {
  uint64_t bytes = 0;
  for (const auto& file : files) bytes += file->store().PresentBytes();
  return bytes;
}

// Fetches every absent chunk with one worker per connection. Returns "" or the first failure.
std::string FetchAll(const std::vector<std::shared_ptr<RemoteFile>>& files, unsigned workers,
                     Progress& progress) {
  struct Job {
    RemoteFile* file;
    uint64_t chunk;
  };
  std::vector<Job> jobs;
  for (const auto& file : files) {
    for (uint64_t chunk = 0; chunk < file->store().chunk_count(); ++chunk) {
      if (!file->store().Present(chunk)) jobs.push_back({file.get(), chunk});
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  std::string error;
  auto cancelled = [&] { return stop.load() || Interrupted(); };
  const unsigned count = std::max(1u, workers);
  std::atomic<unsigned> running{count};
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < count; ++i) {
    threads.emplace_back([&] {
      for (size_t j; !cancelled() && (j = next++) < jobs.size();) {
        int err = jobs[j].file->Fetch(jobs[j].chunk, cancelled);
        if (err != 0 && err != ECANCELED) {
          std::lock_guard lock(error_mu);
          if (error.empty()) {
            error = jobs[j].file->name() + ": chunk " + std::to_string(jobs[j].chunk) +
                    " could not be fetched (" + std::strerror(err) + "; the log above says why)";
          }
          stop = true;
        }
      }
      --running;
    });
  }
  while (running.load() > 0) {
    progress.Update(PresentBytes(files));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& thread : threads) thread.join();
  progress.Update(PresentBytes(files));
  return error;
}

int RunPrefetch(const PrefetchArgs& args) {
  CatchInterrupts();
  ModelTarget target;
  try {
    target = ResolveTarget(args.target, args.sources);
  } catch (const std::exception& e) {
    std::cerr << "aprfs prefetch: " << e.what() << "\n";
    return 1;
  }
  if (target.file) {
    std::cerr << "aprfs prefetch: " << target.label
              << ": not in an aprfs mount (give a mounted .apr or ORG/NAME)\n";
    return 1;
  }
  // A computed file (a quantized APR view, or an .apr with FP8 weights): the daemon computes
  // it into its cache as it is read (fetching what it needs). For the others (their shards'
  // bytes, or cheap conversions of them) the shards are what to fetch.
  if (target.mounted &&
      ((IsAprView(target.mounted->view) && target.mounted->view != ViewKind::kApr) ||
       KeepsComputedBytes(*target.mounted))) {
    return PrefetchMountedView(*target.mounted, target.label);
  }
  if (!target.catalog || (target.mounted && !target.mounted->remote()) ||
      target.catalog->repos.empty()) {
    std::cout << target.label << ": every shard is a local file: nothing to fetch\n";
    return 0;
  }
  target.catalog->remote.verify_when_complete = false;  // done below, with progress
  Catalog catalog(*target.catalog);
  std::vector<std::shared_ptr<const BuiltModel>> models = catalog.All();
  int exit_code = 0;
  for (const auto& model : models) {
    if (!model->file) {
      std::cerr << "aprfs prefetch: " << target.label << ": " << model->error << "\n";
      exit_code = 1;
      continue;
    }
    std::vector<std::shared_ptr<RemoteFile>> remote;
    uint64_t local_bytes = 0;
    for (const auto& source : model->file->sources()) {
      if (auto file = std::dynamic_pointer_cast<RemoteFile>(source)) {
        remote.push_back(file);
      } else {
        local_bytes += source->size();
      }
    }
    const size_t shards = model->file->sources().size();
    if (remote.empty()) {
      std::cout << target.label << ": all " << shards << " shards are in the HF cache\n";
      continue;
    }
    uint64_t total = 0;
    for (const auto& file : remote) total += file->size();
    const uint64_t before = PresentBytes(remote);
    const std::string error = [&] {
      Progress progress("fetch " + target.label, total, before);
      // Twice as many chunks asked for as there are connections: while a chunk is made durable
      // (the commit lane), its connection already has the next one.
      std::string failure =
          FetchAll(remote, 2 * catalog.remote()->fetcher().workers(), progress);
      progress.Finish(Interrupted()       ? "interrupted"
                      : failure.empty() ? "fetched"
                                        : "FAILED");
      return failure;
    }();
    if (Interrupted()) {
      std::cerr << "aprfs prefetch: interrupted with " << HumanBytes(PresentBytes(remote)) << " of "
                << HumanBytes(total) << " cached; run it again to resume\n";
      return 130;
    }
    if (!error.empty()) {
      std::cerr << "aprfs prefetch: " << error << "\n";
      return 1;
    }
    // Verification (and publication) of every shard, in order, with one progress bar.
    Progress progress("verify " + target.label, total);
    uint64_t verified = 0;
    std::vector<std::string> problems, notes;
    for (const auto& file : remote) {
      HashCallbacks callbacks;
      callbacks.cancelled = [] { return Interrupted(); };
      callbacks.progress = [&](uint64_t hashed, uint64_t) { progress.Update(verified + hashed); };
      VerifyResult result = VerifyAndPublish(*catalog.remote(), *file, target.branch, callbacks);
      verified += file->size();
      if (result.verdict == VerifyResult::Verdict::Cancelled) break;
      if (result.verdict != VerifyResult::Verdict::Good) {
        problems.push_back(file->blob().path + ": " + result.message);
      } else {
        notes.push_back(file->blob().path + ": " + result.message);
      }
    }
    progress.Finish(Interrupted() ? "interrupted" : problems.empty() ? "verified" : "FAILED");
    if (Interrupted()) {
      std::cerr << "aprfs prefetch: interrupted while verifying; run it again to finish\n";
      return 130;
    }
    for (const std::string& note : notes) std::cout << "  " << note << "\n";
    if (!problems.empty()) {
      for (const std::string& problem : problems) {
        std::cerr << "aprfs prefetch: " << target.label << ": " << problem << "\n";
      }
      exit_code = 1;
      continue;
    }
    std::cout << target.label << ": " << shards << " shards ready ("
              << HumanBytes(total - std::min(total, before)) << " fetched now, "
              << HumanBytes(std::min(total, before)) << " were cached"
              << (local_bytes ? ", " + HumanBytes(local_bytes) + " already in the HF cache" : "")
              << ")\n";
  }
  return exit_code;
}

}  // namespace

void RegisterPrefetch(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PrefetchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prefetch", "Fetch and verify a whole remote model into the caches ahead of a job");
  cmd->add_option("TARGET", args->target,
                  "A mounted .apr, ORG/NAME[@REVISION], or the name of a configured repo")
      ->required();
  args->sources.AddTo(*cmd);
  cmd->callback([args, &exit_code] {
    SetUpLogging("warn", "");
    exit_code = RunPrefetch(*args);
  });
}

}  // namespace aprfs
