#include "format/gguf/gguf_reader.h"

#include <cstring>
#include <set>

#include "format/error.h"
#include "format/gguf/gguf_container.h"

namespace aprfs {
namespace {

constexpr uint32_t kGgmlTypeCount = 42;  // at the llama.cpp commit gguf-view.md was checked against

struct Truncated {};

// Sequential reads through read_at, a window at a time.
class Cursor {
 public:
  Cursor(const ReadAt& read_at, uint64_t size) : read_at_(read_at), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  std::string Bytes(uint64_t n) {
    if (n > left()) throw Truncated{};
    std::string out;
    out.reserve(n);
    while (out.size() < n) {
      if (pos_ < window_at_ || pos_ >= window_at_ + window_.size()) {
        window_at_ = pos_;
        window_ = read_at_(pos_, std::min<uint64_t>(kWindow, size_ - pos_));
        if (window_.empty()) throw Truncated{};
      }
      const uint64_t take = std::min<uint64_t>(n - out.size(), window_at_ + window_.size() - pos_);
      out.append(window_, pos_ - window_at_, take);
      pos_ += take;
    }
    return out;
  }
  uint64_t U(int n) {
    const std::string b = Bytes(n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(b[i]);
    return v;
  }

 private:
  static constexpr uint64_t kWindow = 1 << 20;
  const ReadAt& read_at_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t window_at_ = 0;
  std::string window_;
};

float AsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One value of `type`; throws Truncated (after noting a problem) for one the loader rejects.
nlohmann::json ReadValue(Cursor& c, uint32_t type, const std::string& key, bool in_array,
                         std::vector<std::string>& problems) {
  constexpr uint64_t kMaxString = 1ull << 30;
  switch (type) {
    case 0: return c.U(1);
    case 1: return static_cast<int8_t>(c.U(1));
    case 2: return c.U(2);
    case 3: return static_cast<int16_t>(c.U(2));
    case 4: return c.U(4);
    case 5: return static_cast<int32_t>(c.U(4));
    case 6: return AsFloat(static_cast<uint32_t>(c.U(4)));
    case 7: return c.U(1) != 0;
    case 8: {
      const uint64_t n = c.U(8);
      if (n > kMaxString || n > c.left()) throw Truncated{};
      return c.Bytes(n);
    }
    case 9: {
      if (in_array) {
        problems.push_back("key " + Quote(key) + ": an array of arrays (llama.cpp: invalid GGUF type)");
        throw Truncated{};
      }
      const uint32_t element = static_cast<uint32_t>(c.U(4));
      const uint64_t n = c.U(8);
      if (n > (1ull << 30)) {
        problems.push_back("key " + Quote(key) + ": " + std::to_string(n) + " elements (llama.cpp reads at most 2^30)");
        throw Truncated{};
      }
      nlohmann::json array = {{"type", element}, {"count", n}};
      nlohmann::json values = nlohmann::json::array();
      for (uint64_t i = 0; i < n; ++i) {
        nlohmann::json v = ReadValue(c, element, key, true, problems);
        if (i < 16) values.push_back(std::move(v));
      }
      if (n <= 16) array["values"] = values;
      return array;
    }
    case 10: return c.U(8);
    case 11: return static_cast<int64_t>(c.U(8));
    case 12: {
      const uint64_t bits = c.U(8);
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    default:
      problems.push_back("key " + Quote(key) + ": value type " + std::to_string(type) +
                         " (llama.cpp: invalid GGUF type)");
      throw Truncated{};
  }
}

}  // namespace

std::string GgmlTypeNameById(uint32_t type) {
  const GgmlLayout* layout = FindGgmlLayout(type);
  return layout ? std::string(layout->name) : "type " + std::to_string(type);
}

const nlohmann::json* GgufFile::Find(const std::string& key) const {
  for (const auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

GgufFile ReadGgufFile(const ReadAt& read_at, uint64_t size, const std::string& file) {
  GgufFile out;
  std::vector<std::string>& problems = out.problems;
  Cursor c(read_at, size);
  try {
    if (c.Bytes(4) != "GGUF") {
      problems.push_back(file + ": no GGUF magic at byte 0");
      return out;
    }
    out.version = static_cast<uint32_t>(c.U(4));
    if (out.version != 3) {
      problems.push_back(file + ": GGUF version " + std::to_string(out.version) +
                         " (llama.cpp reads version 3; 1 and byte-swapped files are refused)");
      return out;
    }
    const uint64_t tensors = c.U(8), kvs = c.U(8);
    if (tensors > (1ull << 40) || kvs > (1ull << 40)) throw Truncated{};
    std::set<std::string> keys;
    for (uint64_t i = 0; i < kvs; ++i) {
      const uint64_t n = c.U(8);
      if (n > c.left()) throw Truncated{};
      const std::string key = c.Bytes(n);
      const uint32_t type = static_cast<uint32_t>(c.U(4));
      nlohmann::json value = ReadValue(c, type, key, false, problems);
      if (!keys.insert(key).second) problems.push_back("key " + Quote(key) + " appears twice");
      if (key == "general.alignment") {
        if (type != 4 || value.get<uint64_t>() == 0 ||
            (value.get<uint64_t>() & (value.get<uint64_t>() - 1)) != 0) {
          problems.push_back("general.alignment must be a u32 power of two (llama.cpp asserts it)");
        } else {
          out.alignment = value.get<uint32_t>();
        }
      }
      out.kv.emplace_back(key, std::move(value));
    }
    std::set<std::string> names;
    for (uint64_t i = 0; i < tensors; ++i) {
      GgufTensorInfo info;
      const uint64_t n = c.U(8);
      if (n > c.left()) throw Truncated{};
      info.name = c.Bytes(n);
      const std::string what = "tensor " + Quote(info.name);
      if (info.name.size() >= 64) problems.push_back(what + ": a name of 64 bytes or more");
      if (!names.insert(info.name).second) problems.push_back(what + " appears twice");
      const uint32_t dims = static_cast<uint32_t>(c.U(4));
      if (dims == 0 || dims > 4) {
        problems.push_back(what + ": " + std::to_string(dims) + " dimensions (llama.cpp: 1 to 4)");
        throw Truncated{};
      }
      for (uint32_t d = 0; d < dims; ++d) info.ne.push_back(c.U(8));
      info.type = static_cast<uint32_t>(c.U(4));
      info.offset = c.U(8);
      if (info.type >= kGgmlTypeCount) {
        problems.push_back(what + ": ggml type " + std::to_string(info.type) + " does not exist");
      } else if (const GgmlLayout* layout = FindGgmlLayout(info.type)) {
        if (info.ne[0] % layout->block != 0) {
          problems.push_back(what + ": rows of " + std::to_string(info.ne[0]) +
                             " elements are not whole " + std::string(layout->name) + " blocks");
        } else {
          uint64_t elements = 1;
          for (uint64_t ne : info.ne) elements *= ne;
          info.bytes = elements / layout->block * layout->bytes;
        }
      }
      out.tensors.push_back(std::move(info));
    }
    out.data_start = (c.pos() + out.alignment - 1) / out.alignment * out.alignment;
  } catch (const Truncated&) {
    problems.push_back(file + ": the header ends early or is malformed near byte " +
                       std::to_string(c.pos()) + " of " + std::to_string(size));
    return out;
  }
  // Offsets in info order, tightly packed with alignment padding; data inside the file.
  std::optional<uint64_t> expected = 0;  // unknown after a tensor of a type aprfs cannot size
  for (const GgufTensorInfo& t : out.tensors) {
    if (expected && t.offset != *expected) {
      problems.push_back("tensor " + Quote(t.name) + " has offset " + std::to_string(t.offset) +
                         ", expected " + std::to_string(*expected) + " (llama.cpp refuses it)");
    }
    if (!t.bytes) {
      expected.reset();
      continue;
    }
    if (out.data_start + t.offset + *t.bytes > size) {
      problems.push_back("tensor " + Quote(t.name) + ": its data ends past the end of the file "
                         "(llama.cpp: tensor data is not within the file bounds)");
    }
    expected = (t.offset + *t.bytes + out.alignment - 1) / out.alignment * out.alignment;
  }
  for (const char* key : {"general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.tokens"}) {
    if (!out.Find(key)) problems.push_back(std::string("key ") + key + " is missing: llama.cpp needs it");
  }
  return out;
}

}  // namespace aprfs
