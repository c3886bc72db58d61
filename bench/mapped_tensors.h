#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aprfs::bench {

// One tensor's bytes inside a read-only shared mapping.
struct MappedTensor {
  std::string name;
  const unsigned char* data = nullptr;
  uint64_t size = 0;
};

// Files mapped whole (MAP_SHARED, PROT_READ) and the tensors they hold, sorted by name
// byte-wise: the order of an APR index, so walking an .apr and walking its shards touch the
// same bytes in the same order. Unmaps on destruction. Throws std::runtime_error naming the
// file (and tensor) on a file that cannot be mapped or parsed.
class MappedModel {
 public:
  // An APR v2 file, its index read through the mapping with format/apr_reader.
  static MappedModel OpenApr(const std::string& path);
  // Safetensors shards, each header parsed with format/safetensors_header.
  static MappedModel OpenSafetensors(const std::vector<std::string>& paths);

  MappedModel() = default;
  MappedModel(MappedModel&& other) noexcept;
  MappedModel& operator=(MappedModel&&) = delete;
  MappedModel(const MappedModel&) = delete;
  ~MappedModel();

  const std::vector<MappedTensor>& tensors() const { return tensors_; }

 private:
  struct Mapping {
    void* base = nullptr;
    uint64_t size = 0;
  };
  // Maps `path` whole and keeps the mapping; returns its base.
  const unsigned char* Map(const std::string& path, uint64_t& size);

  std::vector<Mapping> mappings_;
  std::vector<MappedTensor> tensors_;
};

}  // namespace aprfs::bench
