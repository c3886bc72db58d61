// The "convert then load" baseline: a streaming merge as a converter (`apr import`) does it.
// Reads the shards' headers, builds the APR plan with the code the mount uses
// (LoadLocalModel + ImportShardSet), then writes the merged file region by region: the
// header, metadata and index, each tensor's bytes copied shard by shard through one bounded
// buffer, the zero padding, and the footer CRC of everything before it; then fsync.
// The result is byte-identical to the .apr a mount of the same folder shows.
//
// Usage: convert_merge MODEL_DIR OUT_FILE [--buffer-mib N]   (default 8 MiB)
// Prints one line of key=value: plan_s, total_s (plan + copy + fsync), bytes, mbs, crc.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "fetch/local_model.h"
#include "format/apr/crc32.h"
#include "format/views/model_import.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Appends to a file through one buffer of fixed size, keeping the CRC of every byte written.
class MergedWriter {
 public:
  MergedWriter(std::string path, size_t buffer_bytes)
      : path_(std::move(path)), buffer_(buffer_bytes) {
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) Fail("cannot create");
  }
  ~MergedWriter() {
    if (fd_ >= 0) close(fd_);
  }

  uint64_t position() const { return written_ + fill_; }
  uint32_t crc() const { return crc_; }  // of the bytes flushed so far

  void Append(const char* bytes, size_t length) {
    while (length > 0) {
      size_t n = std::min(length, buffer_.size() - fill_);
      std::memcpy(buffer_.data() + fill_, bytes, n);
      Advance(n);
      bytes += n;
      length -= n;
    }
  }
  void Zeros(uint64_t length) {
    while (length > 0) {
      size_t n = std::min<uint64_t>(length, buffer_.size() - fill_);
      std::memset(buffer_.data() + fill_, 0, n);
      Advance(n);
      length -= n;
    }
  }
  // `length` bytes of `source` at `offset`, read straight into the buffer.
  void Copy(aprfs::ByteSource& source, uint64_t offset, uint64_t length) {
    while (length > 0) {
      size_t n = std::min<uint64_t>(length, buffer_.size() - fill_);
      if (int err = source.Read(offset, n, buffer_.data() + fill_); err != 0) {
        throw std::runtime_error(source.name() + ": read failed: " + std::strerror(err));
      }
      Advance(n);
      offset += n;
      length -= n;
    }
  }
  void Flush() {
    crc_ = aprfs::Crc32(std::string_view(buffer_.data(), fill_), crc_);
    for (size_t done = 0; done < fill_;) {
      ssize_t n = write(fd_, buffer_.data() + done, fill_ - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) Fail("write failed");
      done += static_cast<size_t>(n);
    }
    written_ += fill_;
    fill_ = 0;
  }
  void Sync() {
    Flush();
    if (fsync(fd_) != 0) Fail("fsync failed");
  }

 private:
  void Advance(size_t n) {
    fill_ += n;
    if (fill_ == buffer_.size()) Flush();
  }
  [[noreturn]] void Fail(const std::string& what) {
    throw std::runtime_error(path_ + ": " + what + ": " + std::strerror(errno));
  }

  std::string path_;
  std::vector<char> buffer_;
  size_t fill_ = 0;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
  int fd_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--buffer-mib")) {
    std::fprintf(stderr, "usage: convert_merge MODEL_DIR OUT_FILE [--buffer-mib N]\n");
    return 2;
  }
  size_t buffer_mib = argc == 5 ? std::strtoul(argv[4], nullptr, 10) : 8;
  if (buffer_mib == 0 || buffer_mib > 1024) {
    std::fprintf(stderr, "convert_merge: --buffer-mib must be 1..1024\n");
    return 2;
  }
  try {
    Clock::time_point start = Clock::now();
    // Named as the mount names a --source folder (its name and file:// URI go in the metadata).
    std::filesystem::path dir = std::filesystem::weakly_canonical(std::filesystem::absolute(argv[1]));
    aprfs::LoadedModel model =
        aprfs::LoadLocalModel(dir.string(), dir.filename().string(), "file://" + dir.string());
    aprfs::ImportedModel imported = aprfs::ImportShardSet(model.set);
    const aprfs::FilePlan& plan = imported.plan;
    double plan_s = Since(start);

    MergedWriter out(argv[2], buffer_mib << 20);
    out.Append(plan.prefix.data(), plan.prefix.size());
    for (const aprfs::DataExtent& extent : plan.extents) {
      out.Zeros(extent.offset - out.position());
      out.Copy(*model.sources[extent.source], extent.source_offset, extent.length);
    }
    out.Zeros(plan.footer_offset - out.position());
    out.Flush();
    uint32_t crc = out.crc();
    char footer[4] = {static_cast<char>(crc), static_cast<char>(crc >> 8),
                      static_cast<char>(crc >> 16), static_cast<char>(crc >> 24)};
    out.Append(footer, sizeof footer);
    out.Sync();
    double total_s = Since(start);
    std::printf("plan_s=%.3f total_s=%.3f bytes=%" PRIu64 " mbs=%.1f crc=%08x\n", plan_s,
                total_s, out.position(), out.position() / total_s / 1e6, crc);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert_merge: %s\n", e.what());
    return 1;
  }
}
