// The INIT reply as the kernel receives it: what FuseInitPatch adds to what libfuse wrote, for
// kernels that offer the features and kernels that do not. The reply goes through a pipe, read
// back byte for byte.
#include "fs/fuse_init_patch.h"

#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace aprfs {
namespace {

constexpr uint64_t kAllowMmap = 1ULL << 36;
constexpr uint64_t kUnique = 42;

std::vector<char> InitRequest(uint32_t minor, uint64_t flags) {
  fuse_in_header header{};
  header.opcode = FUSE_INIT;
  header.unique = kUnique;
  fuse_init_in in{};
  in.major = 7;
  in.minor = minor;
  in.flags = static_cast<uint32_t>(flags);
  in.flags2 = static_cast<uint32_t>(flags >> 32);
  header.len = sizeof(header) + sizeof(in);
  std::vector<char> message(header.len);
  std::memcpy(message.data(), &header, sizeof(header));
  std::memcpy(message.data() + sizeof(header), &in, sizeof(in));
  return message;
}

// What libfuse 3.14 writes: flags of its own, 256 pages, no second word.
fuse_init_out LibfuseReply() {
  fuse_init_out out{};
  out.major = 7;
  out.minor = 38;
  out.flags = FUSE_ASYNC_READ | FUSE_MAX_PAGES;
  out.max_background = 64;
  out.congestion_threshold = 48;
  out.max_pages = 256;
  return out;
}

// Sends `out` as the reply to request `unique` through the patch; returns what was written.
fuse_init_out SendReply(FuseInitPatch& patch, uint64_t unique, const fuse_init_out& out) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  fuse_out_header header{};
  header.len = sizeof(header) + sizeof(out);
  header.unique = unique;
  fuse_init_out copy = out;
  struct iovec iov[2] = {{&header, sizeof(header)}, {&copy, sizeof(copy)}};
  EXPECT_EQ(patch.Writev(fds[1], iov, 2), static_cast<ssize_t>(header.len));
  fuse_out_header header_back{};
  fuse_init_out back{};
  EXPECT_EQ(read(fds[0], &header_back, sizeof(header_back)), static_cast<ssize_t>(sizeof(header_back)));
  EXPECT_EQ(read(fds[0], &back, sizeof(back)), static_cast<ssize_t>(sizeof(back)));
  EXPECT_EQ(header_back.unique, unique);
  EXPECT_EQ(std::memcmp(&copy, &out, sizeof(out)), 0) << "the caller's buffer is never changed";
  close(fds[0]);
  close(fds[1]);
  return back;
}

uint64_t Flags(const fuse_init_out& out) {
  uint64_t flags = out.flags;
  if (out.flags & FUSE_INIT_EXT) flags |= static_cast<uint64_t>(out.flags2) << 32;
  return flags;
}

TEST(FuseInitPatchTest, AsksForMmapOfDirectIoFilesWhenTheKernelOffersIt) {
  FuseInitPatch patch({true});
  std::vector<char> request = InitRequest(45, FUSE_ASYNC_READ | FUSE_MAX_PAGES | FUSE_INIT_EXT | kAllowMmap);
  patch.ObserveRequest(request.data(), request.size());
  EXPECT_FALSE(patch.grants().init_seen) << "nothing is granted before the reply";

  fuse_init_out out = SendReply(patch, kUnique, LibfuseReply());
  EXPECT_EQ(out.max_pages, 256) << "libfuse's fields are kept";
  EXPECT_TRUE(Flags(out) & kAllowMmap);
  EXPECT_TRUE(out.flags & FUSE_INIT_EXT);
  EXPECT_TRUE(out.flags & FUSE_ASYNC_READ) << "libfuse's own flags are kept";
  EXPECT_EQ(out.max_background, 64);

  KernelGrants grants = patch.grants();
  EXPECT_TRUE(grants.init_seen);
  EXPECT_EQ(grants.kernel_minor, 45u);
  EXPECT_TRUE(grants.direct_io_allow_mmap);
  EXPECT_EQ(grants.max_pages, 256);
}

TEST(FuseInitPatchTest, AKernelThatDoesNotOfferMmapOfDirectIoFilesIsNotAskedForIt) {
  FuseInitPatch patch({true});
  // Linux 6.1: extended flags, but no FUSE_DIRECT_IO_ALLOW_MMAP.
  std::vector<char> request = InitRequest(38, FUSE_ASYNC_READ | FUSE_MAX_PAGES | FUSE_INIT_EXT);
  patch.ObserveRequest(request.data(), request.size());
  fuse_init_out out = SendReply(patch, kUnique, LibfuseReply());
  EXPECT_FALSE(Flags(out) & kAllowMmap);
  EXPECT_FALSE(out.flags & FUSE_INIT_EXT) << "no second word to send";
  EXPECT_FALSE(patch.grants().direct_io_allow_mmap);
  EXPECT_TRUE(patch.grants().init_seen);
}

TEST(FuseInitPatchTest, NothingIsAskedThatWasNotWished) {
  FuseInitPatch patch({false});
  std::vector<char> request = InitRequest(45, FUSE_MAX_PAGES | FUSE_INIT_EXT | kAllowMmap);
  patch.ObserveRequest(request.data(), request.size());
  fuse_init_out libfuse = LibfuseReply();
  fuse_init_out out = SendReply(patch, kUnique, libfuse);
  EXPECT_EQ(std::memcmp(&out, &libfuse, sizeof(out)), 0);
  EXPECT_FALSE(patch.grants().direct_io_allow_mmap);
  EXPECT_EQ(patch.grants().max_pages, 256);
}

TEST(FuseInitPatchTest, OtherRepliesPassUnchanged) {
  FuseInitPatch patch({true});
  std::vector<char> request = InitRequest(45, FUSE_MAX_PAGES | FUSE_INIT_EXT | kAllowMmap);
  patch.ObserveRequest(request.data(), request.size());
  // A reply to another request that happens to be as long as an INIT reply.
  fuse_init_out other = LibfuseReply();
  fuse_init_out out = SendReply(patch, kUnique + 1, other);
  EXPECT_EQ(std::memcmp(&out, &other, sizeof(out)), 0);
  EXPECT_FALSE(patch.grants().init_seen);
  // Requests after INIT are not taken for it.
  std::vector<char> later = InitRequest(45, 0);
  reinterpret_cast<fuse_in_header*>(later.data())->unique = 7;
  patch.ObserveRequest(later.data(), later.size());
  EXPECT_TRUE(Flags(SendReply(patch, kUnique, LibfuseReply())) & kAllowMmap);
}

TEST(FuseInitPatchTest, ShortOrForeignMessagesAreIgnored) {
  FuseInitPatch patch({true});
  char tiny[8] = {};
  patch.ObserveRequest(tiny, sizeof tiny);
  std::vector<char> lookup = InitRequest(45, kAllowMmap);
  reinterpret_cast<fuse_in_header*>(lookup.data())->opcode = FUSE_LOOKUP;
  patch.ObserveRequest(lookup.data(), lookup.size());
  fuse_init_out libfuse = LibfuseReply();
  fuse_init_out out = SendReply(patch, kUnique, libfuse);
  EXPECT_EQ(std::memcmp(&out, &libfuse, sizeof(out)), 0) << "no INIT was seen";
}

}  // namespace
}  // namespace aprfs
