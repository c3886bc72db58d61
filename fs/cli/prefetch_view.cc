#include "fs/cli/prefetch_view.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "fs/cli/commands.h"
#include "fs/cli/interrupt.h"
#include "fs/cli/progress.h"

namespace aprfs {
namespace {

// The daemon computes and stores 4 MiB chunks; reads of whole chunks waste nothing.
constexpr uint64_t kPiece = 4u << 20;

// The view's entry in the model's status, re-read from the mount.
nlohmann::json ViewStatusOf(const MountedModel& mounted) {
  std::string error;
  std::optional<nlohmann::json> status = ReadMountStatus(mounted.mountpoint, &error);
  if (!status) return nlohmann::json::object();
  const std::string key = JsonString(mounted.model, "key");
  for (const nlohmann::json& model : status->value("models", nlohmann::json::array())) {
    if (JsonString(model, "key") != key) continue;
    for (const nlohmann::json& view : model.value("views", nlohmann::json::array())) {
      if (JsonString(view, "view") == ViewName(mounted.view)) return view;
    }
  }
  return nlohmann::json::object();
}

uint64_t Number(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

}  // namespace

bool KeepsComputedBytes(const MountedModel& mounted) {
  const nlohmann::json view = ViewStatusOf(mounted);
  return view.contains("cached_bytes") && !view["cached_bytes"].is_null();
}

int PrefetchMountedView(const MountedModel& mounted, const std::string& label) {
  int fd = ::open(mounted.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    std::cerr << "aprfs prefetch: " << label << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  const nlohmann::json before = ViewStatusOf(mounted);
  if (!before.contains("cached_bytes") || before["cached_bytes"].is_null()) {
    ::close(fd);
    std::cout << label << ": the mount keeps no computed bytes (--no-view-cache, or nothing of "
              << "this file is computed): nothing to prefetch\n";
    return 0;
  }
  const uint64_t size = static_cast<uint64_t>(::lseek(fd, 0, SEEK_END));
  const uint64_t pieces = (size + kPiece - 1) / kPiece;
  const uint64_t cached_before = Number(before, "cached_bytes");
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<int> error{0};
  // Two readers per core: the daemon encodes on every core, and remote chunks wait on the network.
  const unsigned workers = std::max(2u, 2 * std::thread::hardware_concurrency());
  std::atomic<unsigned> running{workers};
  std::vector<std::thread> threads;
  {
    Progress progress("compute " + label, size);
    for (unsigned w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        void* raw = nullptr;
        if (posix_memalign(&raw, 4096, kPiece) == 0) {  // O_DIRECT wants aligned buffers
          std::unique_ptr<void, decltype(&std::free)> buffer(raw, &std::free);
          for (uint64_t piece; !Interrupted() && error == 0 && (piece = next++) < pieces;) {
            const uint64_t offset = piece * kPiece;
            const size_t length = static_cast<size_t>(std::min(kPiece, size - offset));
            ssize_t n = ::pread(fd, buffer.get(), length, static_cast<off_t>(offset));
            if (n < 0 || static_cast<size_t>(n) != length) {
              int none = 0;
              error.compare_exchange_strong(none, n < 0 ? errno : EIO);
              break;
            }
            done += length;
          }
        } else {
          error = ENOMEM;
        }
        --running;
      });
    }
    while (running.load() > 0) {
      progress.Update(done.load());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (auto& thread : threads) thread.join();
    progress.Update(done.load());
    progress.Finish(Interrupted() ? "interrupted" : error ? "FAILED" : "computed");
  }
  ::close(fd);
  if (Interrupted() || error == EINTR) {
    std::cerr << "aprfs prefetch: interrupted; run it again to resume (stored chunks are kept)\n";
    return 130;
  }
  if (error) {
    std::cerr << "aprfs prefetch: " << label << ": read failed: " << std::strerror(error)
              << " (the daemon's log says why)\n";
    return 1;
  }
  // The daemon stores computed chunks in the background: the figures once it is done.
  nlohmann::json after = ViewStatusOf(mounted);
  for (int wait = 0; wait < 600 && Number(after, "cache_pending_bytes") > 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = ViewStatusOf(mounted);
  }
  const uint64_t cached = Number(after, "cached_bytes");
  std::cout << label << ": " << HumanBytes(cached) << " of computed bytes cached ("
            << HumanBytes(cached - std::min(cached, cached_before)) << " computed now)\n";
  return 0;
}

}  // namespace aprfs
