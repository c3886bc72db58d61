#include "fs/fuse_init_patch.h"

#include <linux/fuse.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace aprfs {
namespace {

// Not in Debian 12's kernel headers (6.1); the values are the protocol's.
constexpr uint64_t kAllowMmap = 1ULL << 36;  // FUSE_DIRECT_IO_ALLOW_MMAP, protocol 7.39
constexpr uint64_t kInitExt = FUSE_INIT_EXT;  // flags2 is read only with this bit
constexpr uint64_t kMaxPages = FUSE_MAX_PAGES;

}  // namespace

void FuseInitPatch::ObserveRequest(const void* message, size_t length) {
  if (init_unique_.load(std::memory_order_relaxed) != 0) return;
  if (length < sizeof(fuse_in_header)) return;
  fuse_in_header header;
  std::memcpy(&header, message, sizeof(header));
  if (header.opcode != FUSE_INIT) return;
  fuse_init_in in{};
  std::memcpy(&in, static_cast<const char*>(message) + sizeof(header),
              std::min(sizeof(in), length - sizeof(header)));
  uint64_t flags = in.flags;
  if (flags & kInitExt) flags |= static_cast<uint64_t>(in.flags2) << 32;
  offered_minor_.store(in.minor, std::memory_order_relaxed);
  offered_flags_.store(flags, std::memory_order_relaxed);
  init_unique_.store(header.unique, std::memory_order_release);
}

ssize_t FuseInitPatch::Writev(int fd, const struct iovec* iov, int count) {
  const uint64_t init_unique = init_unique_.load(std::memory_order_acquire);
  if (init_unique == 0 || patched_.load(std::memory_order_relaxed) || count < 2 ||
      iov[0].iov_len < sizeof(fuse_out_header)) {
    return ::writev(fd, iov, count);
  }
  fuse_out_header header;
  std::memcpy(&header, iov[0].iov_base, sizeof(header));
  // The reply to INIT, with the fields of protocol 7.28+ (an older kernel: left as it is).
  if (header.unique != init_unique || header.error != 0 ||
      iov[1].iov_len < offsetof(fuse_init_out, unused)) {
    return ::writev(fd, iov, count);
  }
  fuse_init_out out{};
  std::memcpy(&out, iov[1].iov_base, std::min(sizeof(out), iov[1].iov_len));
  const uint64_t offered = offered_flags_.load(std::memory_order_relaxed);
  uint64_t flags = out.flags;
  if (out.flags & kInitExt) flags |= static_cast<uint64_t>(out.flags2) << 32;
  if (wishes_.direct_io_allow_mmap && (offered & kAllowMmap) && (offered & kInitExt)) {
    flags |= kAllowMmap;
  }
  if (flags >> 32) flags |= kInitExt;
  out.flags = static_cast<uint32_t>(flags);
  out.flags2 = static_cast<uint32_t>(flags >> 32);

  grants_.init_seen = true;
  grants_.kernel_minor = offered_minor_.load(std::memory_order_relaxed);
  grants_.direct_io_allow_mmap = (flags & kAllowMmap) != 0;
  grants_.max_pages = (flags & kMaxPages) ? out.max_pages : 0;
  grants_.max_background = out.max_background;

  // Published before the write: the kernel sends the next request (to any worker) as soon as it
  // has taken this reply, maybe before writev returns here.
  patched_.store(true, std::memory_order_release);
  std::vector<struct iovec> amended(iov, iov + count);
  amended[1].iov_base = &out;
  return ::writev(fd, amended.data(), count);
}

KernelGrants FuseInitPatch::grants() const {
  if (!patched_.load(std::memory_order_acquire)) return {};
  return grants_;
}

}  // namespace aprfs
