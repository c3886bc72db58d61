#include "fetch/chunk_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

namespace aprfs {
namespace {

namespace fs = std::filesystem;

// Reads the file size and chunk size a store's map was made for (the first map bytes).
bool ReadMapHeader(const fs::path& map, uint64_t* size, uint32_t* chunk_size) {
  std::ifstream in(map, std::ios::binary);
  char header[24];
  if (!in.read(header, sizeof(header)) || std::string_view(header, 8) != "APRFSCS1") return false;
  std::memcpy(size, header + 8, 8);
  std::memcpy(chunk_size, header + 16, 4);
  return *chunk_size > 0;
}

}  // namespace

std::optional<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value) || value < 0) return std::nullopt;
  std::string unit(end);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return std::nullopt;
  // Beyond 2^63 is no real cache size, and the cast would be undefined.
  if (value * scale >= 9.2e18) return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

ChunkCache::ChunkCache(std::string root, uint64_t limit_bytes, uint64_t memory_bytes)
    : root_(std::move(root)), limit_(limit_bytes), memory_(memory_bytes) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (limit_ > 0) janitor_ = std::thread([this] { Janitor(); });
}

ChunkCache::~ChunkCache() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (janitor_.joinable()) janitor_.join();
}

std::shared_ptr<ChunkStore> ChunkCache::Store(const std::string& etag, uint64_t size) {
  return ChunkStore::Open(root_ + "/" + etag, size, kChunkSize);
}

bool ChunkCache::Reserve(uint64_t bytes) {
  std::lock_guard lock(reserve_mu_);
  const auto incoming = static_cast<int64_t>(in_flight_ + bytes);
  const bool over_limit =
      limit_ > 0 && (!known_present_ || *known_present_ + in_flight_ + bytes > limit_);
  int64_t spare = SpareDiskBytes();
  if (over_limit || spare < incoming) {
    known_present_ = EnforceLimit(in_flight_ + bytes);
    spare = SpareDiskBytes();
  }
  in_flight_ += bytes;
  return spare >= incoming;
}

int64_t ChunkCache::SpareDiskBytes() const {
  struct statvfs disk {};
  if (::statvfs(root_.c_str(), &disk) != 0) return INT64_MAX;
  const double total = static_cast<double>(disk.f_blocks) * static_cast<double>(disk.f_frsize);
  const double available = static_cast<double>(disk.f_bavail) * static_cast<double>(disk.f_frsize);
  return static_cast<int64_t>(available - total * kKeepFreeShare);
}

void ChunkCache::Release(uint64_t bytes, bool stored) {
  std::lock_guard lock(reserve_mu_);
  in_flight_ -= std::min(in_flight_, bytes);
  if (stored && known_present_) *known_present_ += bytes;
}

// Every store of the cache, and its evictable chunks (present, not published).
struct ChunkCache::Scan {
  std::vector<std::shared_ptr<ChunkStore>> stores;
  std::vector<std::tuple<uint32_t, ChunkStore*, uint64_t>> evictable;  // (last access, ...)
  uint64_t present = 0;  // bytes of every present chunk
};

ChunkCache::Scan ChunkCache::ScanStores() {
  Scan scan;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    uint64_t size;
    uint32_t chunk_size;
    if (!ReadMapHeader(entry.path() / "map", &size, &chunk_size)) continue;
    try {
      scan.stores.push_back(ChunkStore::Open(entry.path().string(), size, chunk_size));
    } catch (const std::exception& e) {
      spdlog::debug("chunk cache: skipping {}: {}", entry.path().string(), e.what());
    }
  }
  for (const auto& store : scan.stores) {
    for (uint64_t chunk = 0; chunk < store->chunk_count(); ++chunk) {
      if (!store->Present(chunk)) continue;
      scan.present += store->ChunkLength(chunk);
      if (!store->Published()) {
        scan.evictable.emplace_back(store->LastAccess(chunk), store.get(), chunk);
      }
    }
  }
  return scan;
}

uint64_t ChunkCache::EvictOldest(Scan& scan, uint64_t bytes, bool wait) {
  // One evictor at a time across processes: two passes counting from the same snapshot would
  // evict twice what is needed. Whoever holds the lock does the work.
  int lock_fd = ::open((root_ + "/.evict.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    return 0;
  }
  std::sort(scan.evictable.begin(), scan.evictable.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  uint64_t evicted = 0;
  for (const auto& [access, store, chunk] : scan.evictable) {
    if (evicted >= bytes) break;
    if (store->Evict(chunk)) evicted += store->ChunkLength(chunk);
  }
  ::close(lock_fd);
  return evicted;
}

uint64_t ChunkCache::EnforceLimit(uint64_t incoming) {
  Scan scan = ScanStores();
  // What the cache may hold: the limit, and (since evicting frees disk space) the present
  // bytes plus the disk's spare ones, with what is coming taken out of both.
  const int64_t spare = SpareDiskBytes() - static_cast<int64_t>(incoming);
  const bool over_limit = limit_ > 0 && scan.present + incoming > limit_;
  if (!over_limit && spare >= 0) return scan.present;
  uint64_t target = scan.present;
  if (over_limit) {
    // Down to 90 % of the limit minus what is coming, so downloads do not trigger a pass per chunk.
    const uint64_t room = limit_ / 10 + incoming;
    target = limit_ > room ? limit_ - room : 0;
  }
  if (spare < 0) {
    // Below the disk's free share: back above it, by as much again (at most 64 MiB), for the
    // same reason.
    const uint64_t deficit = static_cast<uint64_t>(-spare);
    const uint64_t again = std::min<uint64_t>(deficit, 64u << 20);
    target = std::min(target, scan.present - std::min(scan.present, deficit + again));
  }
  uint64_t evicted = EvictOldest(scan, scan.present - std::min(target, scan.present), false);
  // The words of the full-disk path too: the same event, whichever rule made room.
  spdlog::debug("chunk cache: older chunks evicted, {} bytes; {} bytes now present (limit {}, "
                "spare disk {})", evicted, scan.present - evicted, limit_, spare);
  return scan.present - evicted;
}

uint64_t ChunkCache::MakeRoom(uint64_t bytes) {
  Scan scan = ScanStores();
  uint64_t evicted = EvictOldest(scan, bytes, true);
  spdlog::debug("chunk cache: the disk is full; evicted {} bytes for {}", evicted, bytes);
  return evicted;
}

void ChunkCache::Janitor() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      std::lock_guard reserve(reserve_mu_);
      known_present_ = EnforceLimit(in_flight_);
    } catch (const std::exception& e) {
      spdlog::warn("chunk cache janitor: {}", e.what());
    }
    lock.lock();
    wake_.wait_for(lock, std::chrono::seconds(5), [&] { return stopping_; });
  }
}

}  // namespace aprfs
