#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace aprfs {

// What the daemon asks of the kernel beyond what libfuse 3.14 can say: libfuse has no
// capability for the second word of INIT flags (kernel >= 5.17). The daemon's replies pass
// through its own writev (fuse_session_custom_io), and this fills those fields into the INIT
// reply on its way to the kernel.
struct KernelWishes {
  // MAP_SHARED mappings of files opened with FOPEN_DIRECT_IO (kernel >= 6.6).
  bool direct_io_allow_mmap = false;
};

// What the INIT exchange settled, as far as the reply can tell.
struct KernelGrants {
  bool init_seen = false;
  uint32_t kernel_minor = 0;
  bool direct_io_allow_mmap = false;  // offered by the kernel and asked for
  uint16_t max_pages = 0;             // pages per request
  uint16_t max_background = 0;
};

class FuseInitPatch {
 public:
  explicit FuseInitPatch(KernelWishes wishes) : wishes_(wishes) {}

  // Every message read from /dev/fuse: remembers the INIT request (its id and what it offers).
  void ObserveRequest(const void* message, size_t length);
  // Writes a reply as writev(2) would, the INIT reply amended.
  ssize_t Writev(int fd, const struct iovec* iov, int count);

  // Valid once the INIT reply went out (any request after INIT).
  KernelGrants grants() const;

 private:
  KernelWishes wishes_;
  std::atomic<uint64_t> init_unique_{0};
  std::atomic<uint32_t> offered_minor_{0};
  std::atomic<uint64_t> offered_flags_{0};  // flags | flags2 << 32
  std::atomic<bool> patched_{false};
  KernelGrants grants_;
};

}  // namespace aprfs
