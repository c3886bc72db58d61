#include "fs/cli/apr_check.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "format/apr/apr_layout.h"
#include "format/apr/crc32.h"
#include "format/error.h"

namespace aprfs {

std::string Hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08X", value);
  return text;
}

ReadAt FileReadAt(int fd, std::function<bool()> cancelled) {
  return [fd, cancelled](uint64_t offset, uint64_t length) {
    std::string out(length, '\0');
    uint64_t done = 0;
    while (done < length) {
      if (cancelled && cancelled()) throw std::runtime_error("interrupted");
      ssize_t n = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("read failed: ") + std::strerror(errno));
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    out.resize(done);
    return out;
  };
}

AprCheck CheckAprFile(const ReadAt& read_at, uint64_t size, bool check_footer,
                      const std::function<void(uint64_t, uint64_t)>& progress) {
  AprCheck check;
  try {
    check.file = ReadAprFile(read_at, size);
    check.problems = LintAprFile(*check.file, read_at);
  } catch (const FormatError& e) {
    check.file.reset();
    check.problems = {std::string("rejected by the APR v2 reader: ") + e.what()};
    return check;
  }
  if (!check.file->HasFooter()) {
    check.footer = "absent (allowed: readers do not need it)";
    return check;
  }
  if (!check_footer) {
    check.footer = "present, not checked";
    return check;
  }
  constexpr uint64_t kStep = 8 << 20;
  const uint64_t end = check.file->RequiredLength();
  uint32_t computed = 0;
  for (uint64_t at = 0; at < end; at += kStep) {
    std::string bytes = read_at(at, std::min(kStep, end - at));
    if (bytes.empty()) throw std::runtime_error("the file ended at byte " + std::to_string(at));
    computed = Crc32(bytes, computed);
    if (progress) progress(at + bytes.size(), end);
  }
  const uint32_t stored = static_cast<uint32_t>(LoadLe(read_at(end, kAprFooterSize), 0, 4));
  if (computed == stored) {
    check.footer = "ok " + Hex32(stored);
  } else {
    check.footer = "MISMATCH: stored " + Hex32(stored) + ", computed " + Hex32(computed);
    check.problems.push_back("footer: " + check.footer);
  }
  return check;
}

}  // namespace aprfs
