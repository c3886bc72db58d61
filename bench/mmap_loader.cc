// A model loader as inference engines do it: mmap the file(s) MAP_SHARED PROT_READ, walk the
// tensors in index (name) order and touch every page of every tensor (one byte per 4 KiB plus
// the last byte, folded into a checksum so nothing is optimized away). With --procs N, N
// processes do it at once on the same files, as N workers loading one model.
//
// Usage: mmap_loader [--procs N] [--copy] --apr FILE
//        mmap_loader [--procs N] [--copy] --safetensors SHARD...
// Prints one line of key=value: procs, tensors, bytes (per process), checksum, index_s (the
// slowest process's time until its index was parsed), first_tensor_s (until its first tensor
// was touched), wall_s (until every process was done), mbs (bytes / wall_s). Times count from
// the start of this program, so they include opening (and, on a mount, the plan build).
// The checksum is the same for an .apr and its shards. Exit 1 on any error.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/mapped_tensors.h"

namespace {

using aprfs::bench::MappedModel;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// What one loader process reports to the parent through a pipe.
struct Report {
  double index_s = 0;
  double first_tensor_s = 0;
  double done_s = 0;
  uint64_t tensors = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 14695981039346656037ull;
  char error[512] = {};
};

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t Touch(const unsigned char* data, uint64_t size, uint64_t hash) {
  if (size == 0) return hash;
  for (uint64_t at = 0; at < size; at += kPage) hash = hash * kFnvPrime + data[at];
  return hash * kFnvPrime + data[size - 1];
}

Report Load(bool apr, bool copy, const std::vector<std::string>& files, Clock::time_point start) {
  Report report;
  try {
    MappedModel model = apr ? MappedModel::OpenApr(files[0]) : MappedModel::OpenSafetensors(files);
    report.index_s = Since(start);
    std::vector<unsigned char> staging;
    for (const auto& tensor : model.tensors()) {
      const unsigned char* data = tensor.data;
      if (copy) {
        if (staging.size() < tensor.size) staging.resize(tensor.size);
        std::memcpy(staging.data(), tensor.data, tensor.size);
        data = staging.data();
      }
      report.checksum = Touch(data, tensor.size, report.checksum);
      report.bytes += tensor.size;
      if (++report.tensors == 1) report.first_tensor_s = Since(start);
    }
    report.done_s = Since(start);
  } catch (const std::exception& e) {
    std::snprintf(report.error, sizeof report.error, "%s", e.what());
  }
  return report;
}

int Usage() {
  std::fprintf(stderr,
               "usage: mmap_loader [--procs N] [--copy] --apr FILE\n"
               "       mmap_loader [--procs N] [--copy] --safetensors SHARD...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 1;
  int mode = 0;  // 1 apr, 2 safetensors
  bool copy = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--procs" && i + 1 < argc) {
      procs = std::atoi(argv[++i]);
    } else if (arg == "--copy") {
      copy = true;
    } else if (arg == "--apr" && mode == 0) {
      mode = 1;
    } else if (arg == "--safetensors" && mode == 0) {
      mode = 2;
    } else if (mode != 0 && arg.rfind("--", 0) != 0) {
      files.push_back(arg);
    } else {
      return Usage();
    }
  }
  if (mode == 0 || files.empty() || procs < 1 || procs > 64 || (mode == 1 && files.size() != 1)) {
    return Usage();
  }

  Clock::time_point start = Clock::now();
  std::vector<int> pipes;
  std::vector<pid_t> children;
  for (int p = 0; p < procs; ++p) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("mmap_loader: pipe");
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("mmap_loader: fork");
      return 1;
    }
    if (pid == 0) {
      close(fds[0]);
      Report report = Load(mode == 1, copy, files, start);
      ssize_t written = write(fds[1], &report, sizeof report);
      _exit(written == static_cast<ssize_t>(sizeof report) ? 0 : 1);
    }
    close(fds[1]);
    pipes.push_back(fds[0]);
    children.push_back(pid);
  }

  std::vector<Report> reports(procs);
  bool ok = true;
  for (int p = 0; p < procs; ++p) {
    ssize_t got = read(pipes[p], &reports[p], sizeof(Report));
    close(pipes[p]);
    int status = 0;
    waitpid(children[p], &status, 0);
    if (got != static_cast<ssize_t>(sizeof(Report)) || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "mmap_loader: process %d died (status %d)\n", p, status);
      ok = false;
    } else if (reports[p].error[0] != '\0') {
      std::fprintf(stderr, "mmap_loader: %s\n", reports[p].error);
      ok = false;
    }
  }
  double wall_s = Since(start);
  if (!ok) return 1;

  Report slowest;
  for (const Report& r : reports) {
    if (r.checksum != reports[0].checksum || r.bytes != reports[0].bytes) {
      std::fprintf(stderr, "mmap_loader: the processes saw different bytes\n");
      return 1;
    }
    slowest.index_s = std::max(slowest.index_s, r.index_s);
    slowest.first_tensor_s = std::max(slowest.first_tensor_s, r.first_tensor_s);
  }
  std::printf("procs=%d tensors=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
              " index_s=%.3f first_tensor_s=%.3f wall_s=%.3f mbs=%.1f\n",
              procs, reports[0].tensors, reports[0].bytes, reports[0].checksum, slowest.index_s,
              slowest.first_tensor_s, wall_s, reports[0].bytes / wall_s / 1e6);
  return 0;
}
