#include "bench/mapped_tensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "format/apr/apr_reader.h"
#include "format/safetensors/safetensors_header.h"

namespace aprfs::bench {
namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

void SortByName(std::vector<MappedTensor>& tensors) {
  // std::string compares chars as unsigned: the byte-wise order of the APR index.
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const MappedTensor& a, const MappedTensor& b) { return a.name < b.name; });
}

}  // namespace

MappedModel::MappedModel(MappedModel&& other) noexcept
    : mappings_(std::move(other.mappings_)), tensors_(std::move(other.tensors_)) {
  other.mappings_.clear();
}

MappedModel::~MappedModel() {
  for (const Mapping& m : mappings_) munmap(m.base, m.size);
}

const unsigned char* MappedModel::Map(const std::string& path, uint64_t& size) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    Fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    close(fd);
    Fail(path, "empty file");
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) Fail(path, std::string("cannot mmap: ") + std::strerror(err));
  mappings_.push_back({base, size});
  return static_cast<const unsigned char*>(base);
}

MappedModel MappedModel::OpenApr(const std::string& path) {
  MappedModel model;
  uint64_t size = 0;
  const unsigned char* base = model.Map(path, size);
  ReadAt read_at = [&](uint64_t offset, uint64_t length) {
    if (offset >= size) return std::string();
    return std::string(reinterpret_cast<const char*>(base) + offset,
                       std::min(length, size - offset));
  };
  AprFile apr;
  try {
    apr = ReadAprFile(read_at, size);
  } catch (const std::exception& e) {
    Fail(path, e.what());
  }
  for (AprIndexEntry& entry : apr.index) {
    uint64_t start = apr.header.data_offset + entry.offset;
    if (start < apr.header.data_offset || start > size || entry.size > size - start) {
      Fail(path, "tensor '" + entry.name + "' lies outside the file");
    }
    model.tensors_.push_back({std::move(entry.name), base + start, entry.size});
  }
  SortByName(model.tensors_);  // already in index order; kept for equal names' stability
  return model;
}

MappedModel MappedModel::OpenSafetensors(const std::vector<std::string>& paths) {
  MappedModel model;
  for (const std::string& path : paths) {
    uint64_t size = 0;
    const unsigned char* base = model.Map(path, size);
    std::string_view bytes(reinterpret_cast<const char*>(base), size);
    SafetensorsHeader header;
    try {
      uint64_t header_len = ParseSafetensorsHeaderLength(bytes.substr(0, 8), size, path);
      header = ParseSafetensorsHeader(bytes.substr(8, header_len), size, path);
    } catch (const std::exception& e) {
      Fail(path, e.what());
    }
    for (SafetensorsTensor& tensor : header.tensors) {
      model.tensors_.push_back(
          {std::move(tensor.name), base + header.data_start() + tensor.begin, tensor.size()});
    }
  }
  SortByName(model.tensors_);
  return model;
}

}  // namespace aprfs::bench
