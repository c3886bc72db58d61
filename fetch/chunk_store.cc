#include "fetch/chunk_store.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/sync/scoped_lock.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "fetch/page_cache.h"

namespace aprfs {
namespace {

namespace bip = boost::interprocess;

constexpr char kMagic[8] = {'A', 'P', 'R', 'F', 'S', 'C', 'S', '1'};
constexpr size_t kHeaderSize = 64;
constexpr uint32_t kPresent = 0x80000000u;
constexpr uint32_t kGeneration = 0x7FFFFFFFu;
constexpr uint32_t kFlagPublished = 1;

// The map's first 64 bytes.
struct MapHeader {
  char magic[8];
  uint64_t file_size;
  uint32_t chunk_size;
  uint32_t flags;
  uint64_t chunk_count;
  uint64_t validator;  // ChunkStore::Validator(); 0 in stores written before it existed
  char reserved[24];
};
static_assert(sizeof(MapHeader) == kHeaderSize);

std::runtime_error SystemError(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

int OpenOrThrow(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError("cannot open", path);
  return fd;
}

uint64_t MapBytes(uint64_t chunk_count) { return kHeaderSize + 8 * chunk_count; }

// Makes `map` (open as map_fd) describe an empty store for these parameters.
bool InitializeEmpty(const std::string& dir, int map_fd, uint64_t size, uint32_t chunk_size,
                     uint64_t chunk_count) {
  // Whatever the data file holds is not vouched for by any map: start empty.
  int data_fd = OpenOrThrow(dir + "/data", O_RDWR | O_CREAT);
  bool ok = ::ftruncate(data_fd, 0) == 0 && ::ftruncate(data_fd, static_cast<off_t>(size)) == 0;
  ::close(data_fd);
  MapHeader header{};
  std::memcpy(header.magic, kMagic, 8);
  header.file_size = size;
  header.chunk_size = chunk_size;
  header.flags = 0;
  header.chunk_count = chunk_count;
  return ok && ::ftruncate(map_fd, 0) == 0 &&
         ::ftruncate(map_fd, static_cast<off_t>(MapBytes(chunk_count))) == 0 &&
         ::pwrite(map_fd, &header, sizeof(header), 0) == sizeof(header) && ::fsync(map_fd) == 0;
}

// A store marked published whose publication claim nobody holds: its publisher died between
// marking it and removing the store (the map goes before the claim is released). The data file
// is then either still here (not moved yet, or moved back) and the flag is cleared, so the next
// loader verifies and publishes it again; or it went into the HF cache under a temporary name,
// and the store starts empty. Requires the store lock.
void RecoverInterruptedPublication(const std::string& dir, int map_fd, MapHeader& header) {
  if ((header.flags & kFlagPublished) == 0) return;
  int claims_fd = ::open((dir + "/claims").c_str(), O_RDWR | O_CLOEXEC);
  if (claims_fd < 0) return;  // removed: the publication completed
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(header.chunk_count);  // the publication's byte
  lock.l_len = 1;
  // Free, and the map still ours: a publisher that completed removed the map before it let go.
  struct stat ours, named;
  const bool publisher_gone = ::fcntl(claims_fd, F_OFD_SETLK, &lock) == 0 &&
                              ::fstat(map_fd, &ours) == 0 &&
                              ::stat((dir + "/map").c_str(), &named) == 0 &&
                              ours.st_ino == named.st_ino && ours.st_dev == named.st_dev;
  bool ok = true;
  if (publisher_gone && std::filesystem::exists(dir + "/data")) {
    header.flags &= ~kFlagPublished;
    ok = ::pwrite(map_fd, &header, sizeof(header), 0) == sizeof(header) && ::fsync(map_fd) == 0;
    spdlog::warn("{}: its publication to the HF cache was interrupted; verified again", dir);
  } else if (publisher_gone) {
    ok = InitializeEmpty(dir, map_fd, header.file_size, header.chunk_size, header.chunk_count);
    spdlog::warn("{}: its publication to the HF cache was interrupted after the data moved; "
                 "downloaded again", dir);
  }
  ::close(claims_fd);  // releases the lock
  if (!ok) throw SystemError("cannot recover", dir);
}

// Makes `map` describe a store for these parameters: the existing one when it does, an empty one
// otherwise.
void PrepareFiles(const std::string& dir, uint64_t size, uint32_t chunk_size,
                  uint64_t chunk_count) {
  int map_fd = OpenOrThrow(dir + "/map", O_RDWR | O_CREAT);
  struct stat st;
  MapHeader header{};
  bool valid = ::fstat(map_fd, &st) == 0 &&
               static_cast<uint64_t>(st.st_size) == MapBytes(chunk_count) &&
               ::pread(map_fd, &header, sizeof(header), 0) == sizeof(header) &&
               std::memcmp(header.magic, kMagic, 8) == 0 && header.file_size == size &&
               header.chunk_size == chunk_size && header.chunk_count == chunk_count;
  try {
    if (valid) {
      RecoverInterruptedPublication(dir, map_fd, header);
    } else if (!InitializeEmpty(dir, map_fd, size, chunk_size, chunk_count)) {
      throw SystemError("cannot initialize", dir);
    }
  } catch (...) {
    ::close(map_fd);
    throw;
  }
  // Every page of the map backed by disk now: the words are written through the mapping, and a
  // store into a hole of a full filesystem is a SIGBUS that kills the daemon, not an error.
  // (Skipped when it already is: glibc emulates fallocate by writing where the filesystem lacks
  // it, which must not race with the words other processes store.)
  const uint64_t map_bytes = MapBytes(chunk_count);
  bool backed = ::fstat(map_fd, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= map_bytes;
  int err = backed ? 0 : ::posix_fallocate(map_fd, 0, static_cast<off_t>(map_bytes));
  if (err != 0) {
    ::close(map_fd);
    errno = err;
    throw SystemError("cannot allocate the chunk map", dir + "/map");
  }
  ::close(map_fd);
}

// One store object per folder per process: fcntl record locks (the `lock` file) belong to the
// process, and a second descriptor closed elsewhere would drop them.
std::mutex registry_mu;
std::map<std::string, std::weak_ptr<ChunkStore>>& Registry() {
  static std::map<std::string, std::weak_ptr<ChunkStore>> registry;
  return registry;
}

uint32_t NowSeconds() {
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

ChunkStore::ChunkStore(std::string dir, uint64_t size, uint32_t chunk_size)
    : dir_(std::move(dir)),
      size_(size),
      chunk_size_(chunk_size),
      chunk_count_((size + chunk_size - 1) / chunk_size) {}

std::shared_ptr<ChunkStore> ChunkStore::Open(const std::string& dir, uint64_t size,
                                             uint32_t chunk_size) {
  std::lock_guard registry_lock(registry_mu);
  if (auto existing = Registry()[dir].lock()) {
    if (existing->size() == size && existing->chunk_size() == chunk_size) return existing;
    throw std::runtime_error(dir + ": already open with another size");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  ::close(OpenOrThrow(dir + "/lock", O_RDWR | O_CREAT));  // no lock of ours held yet

  std::shared_ptr<ChunkStore> store(new ChunkStore(dir, size, chunk_size));
  store->store_lock_ = bip::file_lock((dir + "/lock").c_str());
  {
    bip::scoped_lock<bip::file_lock> lock(store->store_lock_);
    PrepareFiles(dir, size, chunk_size, store->chunk_count_);
  }
  store->data_fd_ = OpenOrThrow(dir + "/data", O_RDWR);
  // The kernel's own readahead serves a sequential reader of the data file: it reads ahead
  // asynchronously in large folios. (Our own POSIX_FADV_WILLNEED windows filled the page cache
  // a 4 KiB page at a time: every request then paid ~0.4 ms to read ahead and ~0.25 ms to drop
  // its pages, and a chunk store read at 0.6x the bytes per second of a shard.) What it read
  // ahead is dropped as it is served, like the rest.
  // Whole chunks from page-aligned buffers are written past the page cache: the bytes are
  // served from memory meanwhile (ChunkMemory), and a copy into the page cache cost a quarter of
  // the daemon's CPU on a cold read. Not every filesystem has O_DIRECT: then none.
  store->direct_fd_ = ::open((dir + "/data").c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  // Readahead is a property of an open file: reads behind their reader go through a file of
  // their own that never reads ahead, and leave the other's sequential state alone.
  store->no_read_ahead_fd_ = OpenOrThrow(dir + "/data", O_RDONLY);
  ::posix_fadvise(store->no_read_ahead_fd_, 0, 0, POSIX_FADV_RANDOM);
  store->claims_fd_ = OpenOrThrow(dir + "/claims", O_RDWR | O_CREAT);
  store->evict_fd_ = OpenOrThrow(dir + "/claims", O_RDWR);
  store->map_file_ = bip::file_mapping((dir + "/map").c_str(), bip::read_write);
  store->map_ = bip::mapped_region(store->map_file_, bip::read_write);
  store->words_ = reinterpret_cast<uint32_t*>(static_cast<char*>(store->map_.get_address()) +
                                              kHeaderSize);
  Registry()[dir] = store;
  return store;
}

ChunkStore::~ChunkStore() {
  for (int fd : {data_fd_, direct_fd_, no_read_ahead_fd_, claims_fd_, evict_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

uint64_t ChunkStore::ChunkLength(uint64_t chunk) const {
  return std::min<uint64_t>(chunk_size_, size_ - ChunkBegin(chunk));
}

std::atomic_ref<uint32_t> ChunkStore::Word(uint64_t chunk) const {
  return std::atomic_ref<uint32_t>(words_[chunk]);
}

std::atomic_ref<uint32_t> ChunkStore::Access(uint64_t chunk) const {
  return std::atomic_ref<uint32_t>(words_[chunk_count_ + chunk]);
}

std::atomic_ref<uint32_t> ChunkStore::Flags() const {
  auto* header = static_cast<MapHeader*>(map_.get_address());
  return std::atomic_ref<uint32_t>(header->flags);
}

std::atomic_ref<uint64_t> ChunkStore::ValidatorWord() const {
  auto* header = static_cast<MapHeader*>(map_.get_address());
  return std::atomic_ref<uint64_t>(header->validator);
}

uint64_t ChunkStore::Validator() const {
  return ValidatorWord().load(std::memory_order_acquire);
}

bool ChunkStore::AdoptValidator(uint64_t validator) {
  uint64_t expected = 0;
  return ValidatorWord().compare_exchange_strong(expected, validator,
                                                 std::memory_order_acq_rel) ||
         expected == validator;
}

bool ChunkStore::ReplaceValidator(uint64_t old, uint64_t validator) {
  std::lock_guard in_process(store_mu_);
  bip::scoped_lock<bip::file_lock> across_processes(store_lock_);
  if (Published() || Validator() != old) return false;
  // The new validator first: a reader that sees a chunk of the new version also sees it (the
  // chunk's word is stored after it), and a download of the old version can no longer commit.
  ValidatorWord().store(validator, std::memory_order_release);
  for (uint64_t chunk = 0; chunk < chunk_count_; ++chunk) {
    if (!Present(chunk)) continue;
    // Not through claims: a fetcher may hold one on a present chunk for a moment (it then
    // finds it absent and downloads it); writers only ever write absent chunks.
    auto word = Word(chunk);
    word.store((word.load(std::memory_order_relaxed) + 1) & kGeneration, std::memory_order_release);
    PunchHole(chunk);
  }
  return true;
}

bool ChunkStore::Present(uint64_t chunk) const {
  return (Word(chunk).load(std::memory_order_acquire) & kPresent) != 0;
}

uint64_t ChunkStore::PresentCount() const {
  uint64_t count = 0;
  for (uint64_t chunk = 0; chunk < chunk_count_; ++chunk) count += Present(chunk);
  return count;
}

uint64_t ChunkStore::PresentBytes() const {
  uint64_t bytes = 0;
  for (uint64_t chunk = 0; chunk < chunk_count_; ++chunk) {
    if (Present(chunk)) bytes += ChunkLength(chunk);
  }
  return bytes;
}

std::vector<uint32_t> ChunkStore::Generations() const {
  std::vector<uint32_t> words(chunk_count_);
  for (uint64_t chunk = 0; chunk < chunk_count_; ++chunk) {
    words[chunk] = Word(chunk).load(std::memory_order_acquire);
  }
  return words;
}

uint32_t ChunkStore::LastAccess(uint64_t chunk) const {
  return Access(chunk).load(std::memory_order_relaxed);
}

void ChunkStore::Touch(uint64_t chunk) {
  uint32_t now = NowSeconds();
  if (Access(chunk).load(std::memory_order_relaxed) != now) {
    Access(chunk).store(now, std::memory_order_relaxed);
  }
}

int ChunkStore::Read(uint64_t offset, size_t length, char* dst, bool read_ahead) {
  if (length == 0) return 0;
  if (offset >= size_ || length > size_ - offset) return EIO;
  uint64_t first = ChunkOf(offset), last = ChunkOf(offset + length - 1);
  uint32_t before[8];
  std::vector<uint32_t> many;
  uint32_t* words = last - first < 8 ? before : (many.resize(last - first + 1), many.data());
  for (uint64_t chunk = first; chunk <= last; ++chunk) {
    uint32_t word = Word(chunk).load(std::memory_order_acquire);
    if (!(word & kPresent)) return ENODATA;
    words[chunk - first] = word;
  }
  const int fd = read_ahead ? data_fd_ : no_read_ahead_fd_;
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, dst + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return EIO;
    done += static_cast<size_t>(n);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  for (uint64_t chunk = first; chunk <= last; ++chunk) {
    if (Word(chunk).load(std::memory_order_acquire) != words[chunk - first]) return ENODATA;
    Touch(chunk);
  }
  DropServedRange(data_fd_, offset, length, size_);
  return 0;
}

void ChunkStore::DropCached(uint64_t chunk) {
  DropServedRange(data_fd_, ChunkBegin(chunk), ChunkLength(chunk), size_);
}

std::unique_ptr<ChunkStore::Claim> ChunkStore::TryClaimOn(int fd, uint64_t chunk) {
  {
    std::lock_guard lock(claims_mu_);
    if (!claimed_.insert(chunk).second) return nullptr;
  }
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(chunk);
  lock.l_len = 1;
  if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    std::lock_guard guard(claims_mu_);
    claimed_.erase(chunk);
    return nullptr;
  }
  return std::unique_ptr<Claim>(new Claim(this, fd, chunk));
}

void ChunkStore::Release(int fd, uint64_t chunk) {
  struct flock lock {};
  lock.l_type = F_UNLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(chunk);
  lock.l_len = 1;
  ::fcntl(fd, F_OFD_SETLK, &lock);
  std::lock_guard guard(claims_mu_);
  claimed_.erase(chunk);
}

ChunkStore::Claim::~Claim() { store_->Release(fd_, chunk_); }

std::unique_ptr<ChunkStore::Claim> ChunkStore::TryClaim(uint64_t chunk) {
  if (chunk >= chunk_count_) return nullptr;  // the byte after the chunks' is the publication's
  return TryClaimOn(claims_fd_, chunk);
}

int ChunkStore::Write(const Claim& claim, uint64_t offset, std::string_view bytes) {
  uint64_t begin = ChunkBegin(claim.chunk());
  if (offset < begin || offset + bytes.size() > begin + ChunkLength(claim.chunk())) return EINVAL;
  if (Published()) return EROFS;
  const bool aligned = reinterpret_cast<uintptr_t>(bytes.data()) % kDirectAlignment == 0 &&
                       offset % kDirectAlignment == 0 && bytes.size() % kDirectAlignment == 0;
  int fd = aligned && direct_fd_ >= 0 && direct_.load(std::memory_order_relaxed) ? direct_fd_
                                                                            : data_fd_;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                         static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && fd == direct_fd_) {
      // This filesystem or disk wants another alignment: written through the page cache.
      direct_ = false;
      fd = data_fd_;
      continue;
    }
    if (n <= 0) return errno ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

int ChunkStore::Commit(const Claim& claim) { return Commit(std::vector<const Claim*>{&claim}); }

int ChunkStore::Commit(const std::vector<const Claim*>& claims) {
  // Durable first, present second: after a crash a present chunk always has its bytes.
  if (::fdatasync(data_fd_) != 0) return errno;
  MarkPresent(claims);
  return 0;
}

int ChunkStore::Commit(const Claim& claim, uint64_t validator) {
  if (::fdatasync(data_fd_) != 0) return errno;
  // Checked and marked in one step against ReplaceValidator.
  std::lock_guard in_process(store_mu_);
  bip::scoped_lock<bip::file_lock> across_processes(store_lock_);
  if (Validator() != validator) return ESTALE;
  MarkPresent({&claim});
  return 0;
}

void ChunkStore::MarkPresent(const std::vector<const Claim*>& claims) {
  for (const Claim* claim : claims) {
    auto word = Word(claim->chunk());
    uint32_t generation = (word.load(std::memory_order_relaxed) + 1) & kGeneration;
    word.store(kPresent | generation, std::memory_order_release);
    Touch(claim->chunk());
  }
}

bool ChunkStore::Evict(uint64_t chunk) {
  std::lock_guard in_process(store_mu_);
  bip::scoped_lock<bip::file_lock> across_processes(store_lock_);
  if (Published() || !Present(chunk)) return false;
  std::unique_ptr<Claim> claim = TryClaimOn(evict_fd_, chunk);
  if (!claim) return false;
  auto word = Word(chunk);
  // Absent (and a new generation) before the hole: a reader racing us sees the change.
  word.store((word.load(std::memory_order_relaxed) + 1) & kGeneration, std::memory_order_release);
  PunchHole(chunk);
  return true;
}

void ChunkStore::Discard(const Claim& claim) {
  if (Published() || Present(claim.chunk())) return;
  PunchHole(claim.chunk());
}

void ChunkStore::PunchHole(uint64_t chunk) {
  // A whole chunk's length even for the last one: punching past the end of the file frees its
  // final partial block too, where the chunk's exact length would only zero it.
  ::fallocate(data_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
              static_cast<off_t>(ChunkBegin(chunk)), static_cast<off_t>(chunk_size_));
}

void ChunkStore::DropAll() {
  for (uint64_t chunk = 0; chunk < chunk_count_; ++chunk) Evict(chunk);
}

std::unique_ptr<ChunkStore::Claim> ChunkStore::ClaimPublication() {
  std::lock_guard in_process(store_mu_);
  bip::scoped_lock<bip::file_lock> across_processes(store_lock_);
  if (!Complete() || Published()) return nullptr;
  // The byte after the chunks' is the publication's.
  std::unique_ptr<Claim> claim = TryClaimOn(claims_fd_, chunk_count_);
  if (claim) Flags().fetch_or(kFlagPublished, std::memory_order_acq_rel);
  return claim;
}

void ChunkStore::AbandonPublication(const Claim& publication) {
  if (publication.chunk() != chunk_count_) return;
  std::lock_guard in_process(store_mu_);
  bip::scoped_lock<bip::file_lock> across_processes(store_lock_);
  Flags().fetch_and(~kFlagPublished, std::memory_order_acq_rel);
}

bool ChunkStore::Published() const {
  return (Flags().load(std::memory_order_acquire) & kFlagPublished) != 0;
}

}  // namespace aprfs
