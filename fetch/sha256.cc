#include "fetch/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "fetch/page_cache.h"

namespace aprfs {
namespace {

std::string ToHex(const unsigned char* bytes, size_t length) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(length * 2, '\0');
  for (size_t i = 0; i < length; ++i) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 0xF];
  }
  return hex;
}

// An EVP digest in progress. EVP calls only fail on allocation or a broken OpenSSL build,
// so failures throw rather than being threaded through every caller.
class Digest {
 public:
  explicit Digest(const EVP_MD* md) : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), md, nullptr) != 1) {
      throw std::runtime_error("OpenSSL: cannot initialise a digest");
    }
  }

  void Update(const void* data, size_t length) {
    if (EVP_DigestUpdate(ctx_.get(), data, length) != 1) {
      throw std::runtime_error("OpenSSL: EVP_DigestUpdate failed");
    }
  }

  std::string FinalHex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), out, &length) != 1) {
      throw std::runtime_error("OpenSSL: EVP_DigestFinal_ex failed");
    }
    return ToHex(out, length);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// Fills `buffer` with `length` bytes at `offset`; returns the bytes read (short only at EOF)
// or -1 with errno set.
ssize_t ReadFully(int fd, char* buffer, size_t length, uint64_t offset) {
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, buffer + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

HashResult Failed(std::string error, bool cancelled = false) {
  HashResult result;
  result.error = std::move(error);
  result.cancelled = cancelled;
  return result;
}

}  // namespace

HashResult Sha256OfRange(int fd, uint64_t offset, uint64_t length, const std::string& name,
                         const HashCallbacks& callbacks) {
  try {
    // Advisory only: a failure just means no extra readahead.
    (void)::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                          POSIX_FADV_SEQUENTIAL);
    struct stat st;
    const uint64_t file_size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    Digest digest(EVP_sha256());
    std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(kHashReadSize, length)));
    uint64_t hashed = 0;
    while (hashed < length) {
      if (callbacks.cancelled && callbacks.cancelled()) {
        return Failed(name + ": hashing cancelled after " + std::to_string(hashed) + " of " +
                          std::to_string(length) + " bytes",
                      true);
      }
      size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), length - hashed));
      ssize_t n = ReadFully(fd, buffer.data(), want, offset + hashed);
      if (n < 0) {
        return Failed(name + ": read at offset " + std::to_string(offset + hashed) +
                      " failed: " + std::strerror(errno));
      }
      digest.Update(buffer.data(), static_cast<size_t>(n));
      // Hashing is the last use of these bytes here (readers have them in the .apr's own page
      // cache): keeping them would cache a downloaded shard twice.
      DropServedRange(fd, offset + hashed, static_cast<size_t>(n), file_size);
      hashed += static_cast<uint64_t>(n);
      if (static_cast<size_t>(n) < want) {
        return Failed(name + ": file ends at offset " + std::to_string(offset + hashed) +
                      ", before the end of the hashed range (" + std::to_string(offset + length) +
                      ")");
      }
      if (callbacks.progress) callbacks.progress(hashed, length);
    }
    HashResult result;
    result.hex = digest.FinalHex();
    return result;
  } catch (const std::exception& e) {  // allocation or OpenSSL failure
    return Failed(name + ": " + e.what());
  }
}

std::string Sha256Hex(std::string_view bytes) {
  Digest digest(EVP_sha256());
  digest.Update(bytes.data(), bytes.size());
  return digest.FinalHex();
}

std::string GitBlobSha1(std::string_view content) {
  Digest digest(EVP_sha1());
  std::string header = "blob " + std::to_string(content.size());
  digest.Update(header.data(), header.size() + 1);  // the NUL terminator is part of the header
  digest.Update(content.data(), content.size());
  return digest.FinalHex();
}

}  // namespace aprfs
