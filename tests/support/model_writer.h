#pragma once

// Writes safetensors files and model folders for tests. Deliberately shares no code with
// format/: the bytes are built by hand here so a bug in our parser cannot hide itself.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aprfs::testing {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", ...
  std::vector<uint64_t> shape;
  std::string bytes;  // payload; filled by MakeTensor
};

// Bytes per element for the dtypes tests use (whole-byte dtypes only).
uint64_t ElementBytes(const std::string& dtype);
// A tensor whose bytes are a deterministic function of (seed, name).
TestTensor MakeTensor(const std::string& name, const std::string& dtype,
                      std::vector<uint64_t> shape, uint32_t seed = 1);
std::string PseudoRandomBytes(uint64_t length, uint64_t seed);

struct SafetensorsLayout {
  bool pad_header_to_8 = true;             // the official writer pads with spaces
  std::vector<size_t> data_order;          // tensor indexes in data order; empty = as given
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
};

// Serializes tensors into safetensors bytes.
std::string SafetensorsBytes(const std::vector<TestTensor>& tensors,
                             const SafetensorsLayout& layout = {});
void WriteFile(const std::string& path, const std::string& bytes);

// A model folder: shards (each a list of tensors) plus the JSON side files.
struct TestModel {
  std::vector<std::vector<TestTensor>> shards;
  enum class Layout { Index, Single, NoIndex } layout = Layout::Index;
  std::string config_json;     // empty: no config.json
  std::string tokenizer_json;  // empty: no tokenizer.json
  SafetensorsLayout shard_layout;

  std::vector<std::string> ShardNames() const;
  // Every tensor by name, for comparisons.
  std::map<std::string, const TestTensor*> TensorsByName() const;
};

// Writes the model's files into `dir` (created); returns the shard file names.
std::vector<std::string> WriteModel(const std::string& dir, const TestModel& model);

// A llama-like model of `layers` layers split over `shards` shards.
TestModel LlamaLikeModel(int layers, int shards, bool with_lm_head = true, uint32_t seed = 1);

// Lays `folder`'s files out as an HF cache repo: blobs/ named by a hash, snapshots/<commit>/
// relative symlinks, refs/main. Returns the snapshot folder.
std::string WriteHfCacheRepo(const std::string& cache_dir, const std::string& repo_id,
                             const std::string& commit, const std::string& folder);

// A fresh temporary folder removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace aprfs::testing
