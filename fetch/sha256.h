#pragma once

// Content hashes of the Hugging Face cache (hf-hub.md §6.1): a blob is named by the sha256 of
// an LFS/Xet file or by the git blob sha1 of a regular file.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace aprfs {

// Bytes read (and hashed) per pread: large enough for disk throughput, small enough that the
// cancel callback is polled often.
inline constexpr size_t kHashReadSize = 4u << 20;

struct HashCallbacks {
  // Polled before every read; returning true stops the hash (HashResult::cancelled).
  std::function<bool()> cancelled;
  // Called after every read with the bytes hashed so far and the length of the range.
  std::function<void(uint64_t hashed, uint64_t total)> progress;
};

struct HashResult {
  std::string hex;    // lowercase; empty unless ok()
  std::string error;  // what failed, naming the file; empty when ok
  bool cancelled = false;

  bool ok() const { return error.empty(); }
};

// SHA-256 of bytes [offset, offset + length) of `fd`, read with pread (the descriptor's file
// offset is untouched). A file that ends before the range does is an error. `name` (a path)
// is used in error messages only. The hashed pages are dropped from the page cache.
HashResult Sha256OfRange(int fd, uint64_t offset, uint64_t length, const std::string& name,
                         const HashCallbacks& callbacks = {});

// One-shot SHA-256 of a buffer, lowercase hex.
std::string Sha256Hex(std::string_view bytes);

// The git blob id of `content`: sha1("blob <len>\0" + content), lowercase hex. This is the
// etag (and blob name) of a non-LFS file; meant for small files held in memory.
std::string GitBlobSha1(std::string_view content);

}  // namespace aprfs
