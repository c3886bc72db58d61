#include "fetch/meta_cache.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "fetch/local_model.h"
#include "format/error.h"

namespace aprfs {

namespace fs = std::filesystem;

std::optional<std::string> ReadFileIfExists(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  try {
    return ReadSmallFile(path, max_bytes);
  } catch (const FormatError&) {
    return std::nullopt;
  }
}

// Temp file + rename, so a reader (another mount) never sees half a file.
void WriteAtomically(const std::string& path, std::string_view content) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(std::random_device{}());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    // The bytes reach the file at close: on a full disk that is where the write fails, and
    // renaming the empty file into place would stand for these metadata on every later mount.
    out.close();
    if (!out) {
      fs::remove(temp, ec);
      spdlog::warn("cannot write the metadata cache file {}", path);
      return;
    }
  }
  fs::rename(temp, path, ec);
  if (ec) fs::remove(temp, ec);
}

}  // namespace aprfs
