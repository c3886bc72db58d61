#include "tests/support/model_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace aprfs::testing {
namespace {

namespace fs = std::filesystem;

std::string JsonQuote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& name, uint32_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

uint64_t ElementBytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8},  {"C64", 8}};
  auto it = sizes.find(dtype);
  if (it == sizes.end()) throw std::invalid_argument("test writer: dtype " + dtype);
  return it->second;
}

std::string PseudoRandomBytes(uint64_t length, uint64_t seed) {
  std::string out(length, '\0');
  uint64_t state = seed;
  for (uint64_t i = 0; i < length; i += 8) {
    uint64_t word = SplitMix(state);
    for (uint64_t j = 0; j < 8 && i + j < length; ++j) out[i + j] = static_cast<char>(word >> (8 * j));
  }
  return out;
}

TestTensor MakeTensor(const std::string& name, const std::string& dtype,
                      std::vector<uint64_t> shape, uint32_t seed) {
  uint64_t count = 1;
  for (uint64_t d : shape) count *= d;
  TestTensor t{name, dtype, std::move(shape), {}};
  t.bytes = PseudoRandomBytes(count * ElementBytes(dtype), HashName(name, seed));
  return t;
}

std::string SafetensorsBytes(const std::vector<TestTensor>& tensors,
                             const SafetensorsLayout& layout) {
  std::vector<size_t> order = layout.data_order;
  if (order.empty()) {
    for (size_t i = 0; i < tensors.size(); ++i) order.push_back(i);
  }
  std::vector<uint64_t> begin(tensors.size());
  uint64_t cursor = 0;
  std::string data;
  for (size_t i : order) {
    begin[i] = cursor;
    cursor += tensors[i].bytes.size();
    data += tensors[i].bytes;
  }
  // Header keys in the given tensor order, which differs from the data order when asked.
  std::string json = "{";
  if (!layout.metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : layout.metadata) {
      json += (first ? "" : ",") + JsonQuote(k) + ":" + JsonQuote(v);
      first = false;
    }
    json += "}";
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TestTensor& t = tensors[i];
    if (json.size() > 1) json += ",";
    json += JsonQuote(t.name) + ":{\"dtype\":" + JsonQuote(t.dtype) + ",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) json += (d ? "," : "") + std::to_string(t.shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(begin[i]) + "," +
            std::to_string(begin[i] + t.bytes.size()) + "]}";
  }
  json += "}";
  if (layout.pad_header_to_8) {
    while (json.size() % 8) json += ' ';
  } else if (json.size() % 8 == 0) {
    json += ' ';  // make the data start unaligned on purpose
  }
  std::string out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json + data;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("test writer: cannot write " + path);
}

std::vector<std::string> TestModel::ShardNames() const {
  std::vector<std::string> names;
  if (layout == Layout::Single) return {"model.safetensors"};
  char buf[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    names.push_back(buf);
  }
  return names;
}

std::map<std::string, const TestTensor*> TestModel::TensorsByName() const {
  std::map<std::string, const TestTensor*> out;
  for (const auto& shard : shards) {
    for (const auto& t : shard) out[t.name] = &t;
  }
  return out;
}

std::vector<std::string> WriteModel(const std::string& dir, const TestModel& model) {
  fs::create_directories(dir);
  std::vector<std::string> names = model.ShardNames();
  for (size_t i = 0; i < model.shards.size(); ++i) {
    WriteFile(dir + "/" + names[i], SafetensorsBytes(model.shards[i], model.shard_layout));
  }
  if (model.layout == TestModel::Layout::Index) {
    std::string json = "{\"metadata\":{\"total_size\":0},\"weight_map\":{";
    bool first = true;
    for (size_t i = 0; i < model.shards.size(); ++i) {
      for (const TestTensor& t : model.shards[i]) {
        json += (first ? "" : ",") + JsonQuote(t.name) + ":" + JsonQuote(names[i]);
        first = false;
      }
    }
    WriteFile(dir + "/model.safetensors.index.json", json + "}}");
  }
  if (!model.config_json.empty()) WriteFile(dir + "/config.json", model.config_json);
  if (!model.tokenizer_json.empty()) WriteFile(dir + "/tokenizer.json", model.tokenizer_json);
  return names;
}

TestModel LlamaLikeModel(int layers, int shards, bool with_lm_head, uint32_t seed) {
  const uint64_t hidden = 64, vocab = 96, inter = 128;
  std::vector<TestTensor> all;
  all.push_back(MakeTensor("model.embed_tokens.weight", "BF16", {vocab, hidden}, seed));
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    all.push_back(MakeTensor(p + "input_layernorm.weight", "F32", {hidden}, seed));
    all.push_back(MakeTensor(p + "self_attn.q_proj.weight", "BF16", {hidden, hidden}, seed));
    all.push_back(MakeTensor(p + "self_attn.k_proj.weight", "BF16", {hidden / 2, hidden}, seed));
    all.push_back(MakeTensor(p + "mlp.down_proj.weight", "BF16", {hidden, inter}, seed));
    all.push_back(MakeTensor(p + "post_attention_layernorm.weight", "F32", {hidden}, seed));
  }
  all.push_back(MakeTensor("model.norm.weight", "F32", {hidden}, seed));
  if (with_lm_head) all.push_back(MakeTensor("lm_head.weight", "BF16", {vocab, hidden}, seed));
  TestModel model;
  model.shards.resize(shards);
  for (size_t i = 0; i < all.size(); ++i) model.shards[i * shards / all.size()].push_back(all[i]);
  model.config_json =
      "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":64,"
      "\"num_hidden_layers\":" + std::to_string(layers) +
      ",\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":96,"
      "\"intermediate_size\":128,\"max_position_embeddings\":256,\"rope_theta\":500000.0,"
      "\"rms_norm_eps\":1e-05,\"bos_token_id\":1,\"eos_token_id\":2,\"tie_word_embeddings\":" +
      std::string(with_lm_head ? "false" : "true") + "}";
  std::string vocab_json = "{";
  for (uint64_t i = 0; i < vocab - 4; ++i) {
    vocab_json += (i ? "," : "") + JsonQuote("tok" + std::to_string(i)) + ":" + std::to_string(i);
  }
  vocab_json += "}";
  model.tokenizer_json =
      "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":92,\"content\":\"<s>\",\"special\":true},"
      "{\"id\":93,\"content\":\"</s>\",\"special\":true}],\"model\":{\"type\":\"BPE\",\"vocab\":" +
      vocab_json + ",\"merges\":[\"t o\",[\"to\",\"k\"]]}}";
  return model;
}

std::string WriteHfCacheRepo(const std::string& cache_dir, const std::string& repo_id,
                             const std::string& commit, const std::string& folder) {
  std::string repo_folder = "models--" + repo_id;
  for (size_t at = repo_folder.find('/'); at != std::string::npos; at = repo_folder.find('/')) {
    repo_folder.replace(at, 1, "--");
  }
  fs::path repo = fs::path(cache_dir) / repo_folder;
  fs::path snapshot = repo / "snapshots" / commit;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  fs::create_directories(repo / "refs");
  int counter = 0;
  for (const auto& entry : fs::directory_iterator(folder)) {
    // Blob names only need to be unique here; real ones are content hashes.
    std::string blob = std::to_string(std::hash<std::string>{}(commit + entry.path().string())) +
                       std::to_string(counter++);
    fs::copy_file(entry.path(), repo / "blobs" / blob, fs::copy_options::overwrite_existing);
    fs::path link = snapshot / entry.path().filename();
    fs::remove(link);
    fs::create_symlink(fs::path("../../blobs") / blob, link);
  }
  std::ofstream(repo / "refs" / "main", std::ios::trunc) << commit;
  return snapshot.string();
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "aprfs-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace aprfs::testing
