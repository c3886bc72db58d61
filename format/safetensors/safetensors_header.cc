#include "format/safetensors/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "format/error.h"
#include "format/safetensors/safetensors_header_sax.h"
#include "format/utf8.h"

namespace aprfs {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(std::string_view file, const std::string& what, std::string_view rule) {
  throw FormatError(std::string(file) + ": invalid safetensors header: " + what + " (rule " +
                    std::string(rule) + ")");
}

uint64_t ReadU64Le(std::string_view bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

// Parses the JSON as strictly as serde_json does where nlohmann is lenient (no byte-order mark,
// no NUL bytes: nlohmann stops reading at one, checked before), no tensor name twice, no field twice inside a
// tensor entry. The official reader would silently keep one of two equal names, which then
// shows up as a confusing offset error; we name the duplicate instead.
void CheckNoBomNorNul(std::string_view text, std::string_view file) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") {
    Fail(file, "header starts with a byte-order mark", "InvalidHeaderDeserialization");
  }
  if (text.find('\0') != std::string_view::npos) {
    Fail(file, "header contains a NUL byte at " + std::to_string(text.find('\0')),
         "InvalidHeaderDeserialization");
  }
}

// The DOM path: slow on large headers (the parse callback makes nlohmann 3.11 quadratic in the
// number of entries), so only used for headers the SAX fast path refuses, to name their problem.
json ParseStrictly(std::string_view text, std::string_view file) {
  std::set<std::string> tensors;
  std::set<std::string> fields;  // of the tensor entry being parsed
  std::string entry;             // its name
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      entry = parsed.get_ref<const std::string&>();
      fields.clear();
      if (!tensors.insert(entry).second) {
        Fail(file, "tensor " + Quote(entry) + " appears twice", "InvalidHeaderDeserialization");
      }
    } else if (event == json::parse_event_t::key && depth == 2 && entry != "__metadata__") {
      const std::string& field = parsed.get_ref<const std::string&>();
      if (!fields.insert(field).second) {
        Fail(file, "tensor " + Quote(entry) + ": field " + Quote(field) + " appears twice",
             "InvalidHeaderDeserialization");
      }
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    Fail(file, std::string("not valid JSON: ") + e.what(), "InvalidHeaderDeserialization");
  }
}

uint64_t ExpectUnsigned(const json& value, std::string_view file, std::string_view tensor,
                        std::string_view field) {
  if (!value.is_number_unsigned()) {
    Fail(file,
         "tensor " + Quote(tensor) + ": " + std::string(field) +
             " must hold non-negative integers, got " + value.dump(),
         "InvalidHeaderDeserialization");
  }
  return value.get<uint64_t>();
}

SafetensorsTensor ParseTensorEntry(const std::string& name, const json& entry,
                                   std::string_view file) {
  auto bad = [&](const std::string& what) {
    Fail(file, "tensor " + Quote(name) + ": " + what, "InvalidHeaderDeserialization");
  };
  if (!entry.is_object()) bad("entry must be an object, got " + entry.dump());
  // Unknown fields are ignored, as serde does for TensorInfo.
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end()) bad("missing field 'dtype'");
  if (shape_it == entry.end()) bad("missing field 'shape'");
  if (offsets_it == entry.end()) bad("missing field 'data_offsets'");
  if (!dtype_it->is_string()) bad("'dtype' must be a string");
  std::optional<StDtype> dtype = ParseStDtype(dtype_it->get_ref<const std::string&>());
  if (!dtype) bad("unknown dtype " + dtype_it->dump());
  if (!shape_it->is_array()) bad("'shape' must be an array");
  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    bad("'data_offsets' must be an array of two integers");
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  tensor.dtype = *dtype;
  tensor.shape.reserve(shape_it->size());
  for (const json& dim : *shape_it) tensor.shape.push_back(ExpectUnsigned(dim, file, name, "shape"));
  tensor.begin = ExpectUnsigned((*offsets_it)[0], file, name, "data_offsets");
  tensor.end = ExpectUnsigned((*offsets_it)[1], file, name, "data_offsets");
  return tensor;
}

std::map<std::string, std::string> ParseMetadataEntry(const json& entry, std::string_view file) {
  std::map<std::string, std::string> metadata;
  if (entry.is_null()) return metadata;
  if (!entry.is_object()) {
    Fail(file, "__metadata__ must be an object of strings", "InvalidHeaderDeserialization");
  }
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      Fail(file, "__metadata__ value of " + Quote(key) + " must be a string, got " + value.dump(),
           "InvalidHeaderDeserialization");
    }
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// The entries of a header through the DOM, checked in name order: the first problem wins.
void ParseWithDom(std::string_view header_json, std::string_view file, SafetensorsHeader& header) {
  json root = ParseStrictly(header_json, file);
  if (!root.is_object()) {
    Fail(file, "header must be a JSON object", "InvalidHeaderDeserialization");
  }
  header.tensors.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      header.metadata = ParseMetadataEntry(value, file);
    } else {
      header.tensors.push_back(ParseTensorEntry(key, value, file));
    }
  }
}

// Byte size of a tensor from its shape and dtype, or the rule it breaks.
uint64_t ExpectedSize(const SafetensorsTensor& tensor, std::string_view file) {
  uint64_t elements = 1;
  for (uint64_t dim : tensor.shape) {
    if (__builtin_mul_overflow(elements, dim, &elements)) {
      Fail(file, "tensor " + Quote(tensor.name) + ": element count overflows",
           "ValidationOverflow");
    }
  }
  uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, uint64_t{StDtypeBits(tensor.dtype)}, &bits)) {
    Fail(file, "tensor " + Quote(tensor.name) + ": bit count overflows", "ValidationOverflow");
  }
  if (bits % 8 != 0) {
    Fail(file,
         "tensor " + Quote(tensor.name) + ": " + std::to_string(elements) + " elements of " +
             std::string(StDtypeName(tensor.dtype)) + " do not end on a byte boundary",
         "MisalignedSlice");
  }
  return bits / 8;
}

}  // namespace

uint64_t ParseSafetensorsHeaderLength(std::string_view first_bytes, uint64_t file_size,
                                      std::string_view file) {
  if (file_size < 8 || first_bytes.size() < 8) {
    Fail(file, "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte length",
         "HeaderTooSmall");
  }
  uint64_t n = ReadU64Le(first_bytes);
  if (n > kMaxSafetensorsHeaderLen) {
    Fail(file, "header length " + std::to_string(n) + " exceeds 100000000 bytes",
         "HeaderTooLarge");
  }
  if (n > file_size - 8) {
    Fail(file,
         "header length " + std::to_string(n) + " runs past the end of the " +
             std::to_string(file_size) + "-byte file",
         "InvalidHeaderLength");
  }
  return n;
}

SafetensorsHeader ParseSafetensorsHeader(std::string_view header_json, uint64_t file_size,
                                         std::string_view file) {
  SafetensorsHeader header;
  header.header_len = header_json.size();
  if (header.header_len > kMaxSafetensorsHeaderLen) {
    Fail(file, "header length exceeds 100000000 bytes", "HeaderTooLarge");
  }
  if (header.header_len > file_size || file_size - header.header_len < 8) {
    Fail(file, "header runs past the end of the file", "InvalidHeaderLength");
  }
  if (!IsValidUtf8(header_json)) Fail(file, "header is not valid UTF-8", "InvalidHeader");

  CheckNoBomNorNul(header_json, file);
  if (std::optional<SafetensorsEntries> entries = ReadWellFormedSafetensorsEntries(header_json)) {
    header.tensors = std::move(entries->tensors);
    header.metadata = std::move(entries->metadata);
  } else {
    ParseWithDom(header_json, file, header);
  }

  // The official reader sorts by (begin, end) and requires the tensors to tile the buffer. Ties
  // (empty tensors) in name order, as a stable sort of the DOM's name-ordered entries had it.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  uint64_t expected_begin = 0;
  for (const SafetensorsTensor& tensor : header.tensors) {
    if (tensor.begin != expected_begin || tensor.end < tensor.begin) {
      Fail(file,
           "tensor " + Quote(tensor.name) + ": data_offsets [" + std::to_string(tensor.begin) +
               ", " + std::to_string(tensor.end) + "] must start at " +
               std::to_string(expected_begin) + " (where the previous tensor ends) and not end " +
               "before they begin",
           "InvalidOffset");
    }
    expected_begin = tensor.end;
    uint64_t size = ExpectedSize(tensor, file);
    if (tensor.size() != size) {
      Fail(file,
           "tensor " + Quote(tensor.name) + ": data_offsets span " +
               std::to_string(tensor.size()) + " bytes but dtype " +
               std::string(StDtypeName(tensor.dtype)) + " and its shape need " +
               std::to_string(size),
           "TensorInvalidInfo");
    }
  }
  uint64_t data_len = file_size - 8 - header.header_len;
  if (expected_begin != data_len) {
    Fail(file,
         "tensors cover " + std::to_string(expected_begin) + " data bytes but the file holds " +
             std::to_string(data_len) + " after the header",
         "MetadataIncompleteBuffer");
  }
  return header;
}

}  // namespace aprfs
