#include "format/apr/apr_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "format/safetensors/dtype.h"
#include "format/error.h"

namespace aprfs {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(const std::string& message) { throw FormatError(message); }

std::string Hex4(const uint8_t* bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

// Reads the index front to back through a window, so a huge file is never loaded whole.
class Cursor {
 public:
  Cursor(const ReadAt& read_at, uint64_t file_size, uint64_t position)
      : read_at_(read_at), file_size_(file_size), position_(position) {}

  uint64_t position() const { return position_; }
  uint64_t remaining() const { return position_ >= file_size_ ? 0 : file_size_ - position_; }

  // Makes at least `n` bytes available at the cursor if the file has them.
  std::string_view Peek(uint64_t n) {
    uint64_t have = window_start_ + window_.size() - position_;
    if (position_ < window_start_ || position_ > window_start_ + window_.size() || have < n) {
      window_start_ = position_;
      window_ = read_at_(position_, std::min(remaining(), std::max<uint64_t>(n, kWindow)));
    }
    std::string_view view(window_);
    view.remove_prefix(position_ - window_start_);
    return view.substr(0, n);
  }
  void Skip(uint64_t n) { position_ += n; }

 private:
  static constexpr uint64_t kWindow = 1 << 20;
  const ReadAt& read_at_;
  uint64_t file_size_;
  uint64_t position_;
  uint64_t window_start_ = 0;
  std::string window_;
};

AprIndexEntry ReadIndexEntry(Cursor& cursor) {
  auto fail = [](const char* what) { Fail(std::string("Invalid tensor index: ") + what); };
  if (cursor.remaining() < 4) fail("buffer too small");
  uint64_t name_len = LoadLe(cursor.Peek(2), 0, 2);
  if (cursor.remaining() < 2 + name_len + 18) fail("buffer too small for name");
  std::string_view fixed = cursor.Peek(2 + name_len + 2);
  AprIndexEntry entry;
  entry.name.assign(fixed.substr(2, name_len));
  entry.dtype = static_cast<uint8_t>(fixed[2 + name_len]);
  uint64_t ndim = static_cast<uint8_t>(fixed[3 + name_len]);
  if (!AprDtypeName(entry.dtype)) fail("invalid dtype");
  cursor.Skip(4 + name_len);
  if (cursor.remaining() < 8 * ndim) fail("buffer too small for shape");
  std::string_view dims = cursor.Peek(8 * ndim);
  for (uint64_t d = 0; d < ndim; ++d) entry.shape.push_back(LoadLe(dims, 8 * d, 8));
  cursor.Skip(8 * ndim);
  if (cursor.remaining() < 16) fail("buffer too small for offset/size");
  std::string_view tail = cursor.Peek(16);
  entry.offset = LoadLe(tail, 0, 8);
  entry.size = LoadLe(tail, 8, 8);
  cursor.Skip(16);
  return entry;
}

// The typed fields of AprV2Metadata and the JSON each must hold for serde to accept it.
enum class Want { String, OptString, U64, OptU64, OptU32, OptNumber, OptObject };

struct TypedField {
  const char* key;
  Want want;
};

constexpr TypedField kTypedFields[] = {
    {"model_type", Want::String},      {"name", Want::OptString},
    {"description", Want::OptString},  {"author", Want::OptString},
    {"license", Want::OptString},      {"data_source", Want::OptString},
    {"data_license", Want::OptString}, {"version", Want::OptString},
    {"source", Want::OptString},       {"original_format", Want::OptString},
    {"created_at", Want::OptString},   {"total_size", Want::U64},
    {"param_count", Want::U64},        {"quantization", Want::OptObject},
    {"sharding", Want::OptObject},     {"chat_template", Want::OptString},
    {"chat_format", Want::OptString},  {"special_tokens", Want::OptObject},
    {"architecture", Want::OptString}, {"hf_architecture", Want::OptString},
    {"hf_model_type", Want::OptString}, {"hidden_size", Want::OptU64},
    {"num_layers", Want::OptU64},      {"num_heads", Want::OptU64},
    {"num_kv_heads", Want::OptU64},    {"vocab_size", Want::OptU64},
    {"intermediate_size", Want::OptU64}, {"max_position_embeddings", Want::OptU64},
    {"rope_theta", Want::OptNumber},   {"rope_type", Want::OptU32},
    {"rms_norm_eps", Want::OptNumber}, {"head_dim", Want::OptU64},
    {"num_experts", Want::OptU64},     {"num_experts_per_tok", Want::OptU64},
    {"moe_intermediate_size", Want::OptU64},
};

bool Matches(const json& value, Want want) {
  switch (want) {
    case Want::String: return value.is_string();
    case Want::OptString: return value.is_null() || value.is_string();
    case Want::U64: return value.is_number_unsigned();
    case Want::OptU64: return value.is_null() || value.is_number_unsigned();
    case Want::OptU32:
      return value.is_null() ||
             (value.is_number_unsigned() &&
              value.get<uint64_t>() <= std::numeric_limits<uint32_t>::max());
    case Want::OptNumber: return value.is_null() || value.is_number();
    case Want::OptObject: return value.is_null() || value.is_object();
  }
  return false;
}

// Nested objects have required keys too (§4.3).
std::string CheckNested(const json& metadata) {
  auto check = [](const json& object, const char* field, const char* key, bool (*ok)(const json&),
                  bool required) -> std::string {
    auto it = object.find(key);
    if (it == object.end()) {
      return required ? std::string("missing field `") + key + "` in `" + field + "`" : "";
    }
    return ok(*it) ? "" : std::string("invalid type for `") + field + "." + key + "`";
  };
  auto is_string = [](const json& v) { return v.is_string(); };
  auto is_opt_string = [](const json& v) { return v.is_null() || v.is_string(); };
  auto is_u64 = [](const json& v) { return v.is_number_unsigned(); };
  auto is_u8 = [](const json& v) { return v.is_number_unsigned() && v.get<uint64_t>() <= 255; };
  auto is_opt_u64 = [](const json& v) { return v.is_null() || v.is_number_unsigned(); };
  auto is_bool = [](const json& v) { return v.is_boolean(); };
  std::string error;
  auto q = metadata.find("quantization");
  if (q != metadata.end() && q->is_object()) {
    for (std::string e : {check(*q, "quantization", "quant_type", is_string, true),
                          check(*q, "quantization", "bits", is_u8, true),
                          check(*q, "quantization", "block_size", is_opt_u64, false),
                          check(*q, "quantization", "symmetric", is_bool, true)}) {
      if (error.empty()) error = e;
    }
  }
  auto s = metadata.find("sharding");
  if (s != metadata.end() && s->is_object()) {
    for (std::string e : {check(*s, "sharding", "shard_count", is_u64, true),
                          check(*s, "sharding", "shard_index", is_u64, true),
                          check(*s, "sharding", "total_size", is_u64, true),
                          check(*s, "sharding", "pattern", is_opt_string, false)}) {
      if (error.empty()) error = e;
    }
  }
  auto t = metadata.find("special_tokens");
  if (t != metadata.end() && t->is_object()) {
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "im_start_token",
                            "im_end_token"}) {
      std::string e = check(*t, "special_tokens", key, is_opt_string, false);
      if (error.empty()) error = e;
    }
  }
  return error;
}

json ParseMetadata(std::string_view text) {
  json metadata;
  try {
    metadata = json::parse(text);
  } catch (const json::exception& e) {
    Fail(std::string("Metadata error: ") + e.what());
  }
  if (!metadata.is_object()) Fail("Metadata error: metadata must be a JSON object");
  for (const TypedField& field : kTypedFields) {
    auto it = metadata.find(field.key);
    if (it != metadata.end() && !Matches(*it, field.want)) {
      Fail(std::string("Metadata error: invalid type for `") + field.key + "`: " + it->dump());
    }
  }
  std::string nested = CheckNested(metadata);
  if (!nested.empty()) Fail("Metadata error: " + nested);
  return metadata;
}

}  // namespace

uint64_t AprFile::RequiredLength() const {
  uint64_t required = header.data_offset;
  for (const AprIndexEntry& entry : index) {
    uint64_t end = 0;
    if (__builtin_add_overflow(header.data_offset, entry.offset, &end) ||
        __builtin_add_overflow(end, AlignUp64(entry.size), &end) || entry.size > end) {
      return std::numeric_limits<uint64_t>::max();
    }
    required = std::max(required, end);
  }
  return required;
}

AprFile ReadAprFile(const ReadAt& read_at, uint64_t file_size) {
  AprFile file;
  file.file_size = file_size;
  if (file_size < kAprHeaderSize) Fail("Invalid header: file too small");
  std::string header = read_at(0, kAprHeaderSize);
  if (header.size() < kAprHeaderSize) Fail("Invalid header: file too small");
  file.header = DecodeAprHeader(header);
  if (std::memcmp(file.header.magic, kAprMagic, 4) != 0) {
    Fail("Invalid magic: " + Hex4(file.header.magic));
  }
  file.expected_checksum = ComputeAprHeaderChecksum(header);
  if (file.header.checksum != file.expected_checksum) Fail("Checksum mismatch");
  if (file.header.flags & kAprFlagColumnMajor) {
    Fail("Invalid header: LAYOUT-002 violation: file has LAYOUT_COLUMN_MAJOR flag set");
  }
  uint64_t metadata_end = 0;
  if (__builtin_add_overflow(file.header.metadata_offset, uint64_t{file.header.metadata_size},
                             &metadata_end)) {
    Fail("Invalid header: metadata offset+size overflow");
  }
  if (metadata_end > file_size) Fail("Invalid header: file too small for metadata");
  std::string metadata_text = read_at(file.header.metadata_offset, file.header.metadata_size);
  if (metadata_text.size() != file.header.metadata_size) {
    Fail("Invalid header: file too small for metadata");
  }
  file.metadata = ParseMetadata(metadata_text);

  // A forged tensor_count must not make us reserve memory the file cannot back (§10.1).
  uint64_t count = file.header.tensor_count;
  uint64_t index_room =
      file.header.tensor_index_offset < file_size ? file_size - file.header.tensor_index_offset : 0;
  file.index.reserve(std::min<uint64_t>(count, index_room / 20));
  Cursor cursor(read_at, file_size, file.header.tensor_index_offset);
  for (uint64_t i = 0; i < count; ++i) {
    if (cursor.position() > file_size) {
      Fail("Invalid tensor index: tensor index offset past end of file");
    }
    file.index.push_back(ReadIndexEntry(cursor));
  }
  file.index_end = cursor.position();
  for (size_t i = 1; i < file.index.size(); ++i) {
    if (file.index[i].name < file.index[i - 1].name) {
      Fail("Invalid tensor index: tensor index not sorted");
    }
  }
  return file;
}

std::optional<uint64_t> AprPayloadSize(uint8_t dtype, const std::vector<uint64_t>& shape) {
  uint64_t element_bytes = 0;
  switch (dtype) {
    case 0: case 4: element_bytes = 4; break;
    case 1: case 30: element_bytes = 2; break;
    case 3: case 5: element_bytes = 8; break;
    case 6: case 7: element_bytes = 1; break;
    default: return std::nullopt;
  }
  uint64_t size = element_bytes;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(size, dim, &size)) return std::nullopt;
  }
  return size;
}

std::vector<std::string> LintAprFile(const AprFile& file, const ReadAt& read_at) {
  std::vector<std::string> problems;
  const AprHeaderFields& h = file.header;
  auto problem = [&](std::string text) { problems.push_back(std::move(text)); };
  if (h.version_major != 2 || h.version_minor != 0) {
    problem("header: version " + std::to_string(h.version_major) + "." +
            std::to_string(h.version_minor) + ", writers use 2.0");
  }
  if (!(h.flags & kAprFlagRowMajor)) problem("header: LAYOUT_ROW_MAJOR (0x0400) flag not set");
  if (h.flags & 0x0007) {
    problem("header: compression/encryption flag set (0x0001/0x0002/0x0004); realizar would "
            "refuse or misread the file");
  }
  if (h.metadata_offset != kAprHeaderSize) problem("header: metadata_offset is not 64");
  if (h.tensor_index_offset != h.metadata_offset + AlignUp64(h.metadata_size)) {
    problem("header: tensor_index_offset is not metadata_offset + align64(metadata_size)");
  }
  if (file.index_end > h.data_offset) {
    problem("index: entries run past data_offset (realizar would drop the last ones)");
  } else if (h.data_offset != h.tensor_index_offset + AlignUp64(file.index_end -
                                                                std::min(file.index_end,
                                                                         h.tensor_index_offset))) {
    problem("header: data_offset is not tensor_index_offset + align64(index length)");
  }
  if (h.data_offset % kAprAlignment != 0) problem("header: data_offset is not 64-byte aligned");

  std::set<std::string_view> names;
  for (const AprIndexEntry& e : file.index) {
    std::string who = "tensor " + Quote(e.name) + ": ";
    if (!names.insert(e.name).second) problem(who + "name appears twice in the index");
    if (e.name.size() > kAprMaxTensorName) problem(who + "name longer than 256 bytes");
    if (e.shape.size() > kAprMaxDims) problem(who + "more than 8 dimensions");
    if (e.offset % kAprAlignment != 0) problem(who + "offset is not a multiple of 64");
    uint64_t end = 0;
    if (__builtin_add_overflow(h.data_offset, e.offset, &end) ||
        __builtin_add_overflow(end, e.size, &end) || end > file.file_size) {
      problem(who + "payload runs past the end of the file");
    }
    std::optional<uint64_t> expected = AprPayloadSize(e.dtype, e.shape);
    if (expected && *expected != e.size) {
      problem(who + "size " + std::to_string(e.size) + " but dtype and shape need " +
              std::to_string(*expected));
    }
  }
  if (file.file_size < file.RequiredLength()) {
    problem("file: shorter than the end of its last padded tensor (required_file_len)");
  } else if (file.file_size != file.RequiredLength() &&
             file.file_size != file.RequiredLength() + kAprFooterSize) {
    problem("file: length is neither required_file_len nor required_file_len + 4 (footer)");
  }

  // Alias keys make realizar drop the whole metadata (§4.4).
  static const char* const kAliases[] = {
      "hidden_dim", "d_model", "n_embd", "n_layers", "num_hidden_layers", "n_layer", "n_heads",
      "num_attention_heads", "n_head", "n_kv_heads", "num_key_value_heads", "n_vocab", "ffn_dim",
      "intermediate_dim", "n_inner", "max_seq_len", "context_length", "n_ctx", "layer_norm_eps",
      "norm_eps"};
  for (const char* alias : kAliases) {
    if (file.metadata.contains(alias)) {
      problem(std::string("metadata: alias key `") + alias +
              "` present; realizar then ignores all metadata");
    }
  }

  // Padding after the metadata and after the index must be zeros.
  auto check_zeros = [&](uint64_t from, uint64_t to, const char* what) {
    if (to <= from || to - from > kAprAlignment) return;
    std::string pad = read_at(from, to - from);
    if (std::any_of(pad.begin(), pad.end(), [](char c) { return c != 0; })) {
      problem(std::string(what) + ": padding bytes are not zero");
    }
  };
  check_zeros(h.metadata_offset + h.metadata_size, h.tensor_index_offset, "metadata");
  check_zeros(file.index_end, h.data_offset, "index");
  return problems;
}

}  // namespace aprfs
