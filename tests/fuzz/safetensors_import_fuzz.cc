// libFuzzer target: a whole shard file's first bytes (8-byte length + JSON header). Whatever the
// parser accepts must import into an APR file that aprender's reader accepts and whose layout
// lint is clean; anything else must be a FormatError. Any other exception, crash or
// sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "format/apr/apr_reader.h"
#include "format/error.h"
#include "format/views/model_import.h"
#include "format/safetensors/safetensors_header.h"

using namespace aprfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The data buffer is not part of the input: the file is as long as the header says it needs,
  // plus a little, so offsets past the end are also tried.
  constexpr uint64_t kExtra = 4096;
  Shard shard;
  shard.file = "model.safetensors";
  try {
    uint64_t len = ParseSafetensorsHeaderLength(bytes.substr(0, 8), 8 + size + kExtra, shard.file);
    if (8 + len > size) return 0;
    shard.size = 8 + len + kExtra;
    shard.header = ParseSafetensorsHeader(bytes.substr(8, len), shard.size, shard.file);
  } catch (const FormatError&) {
    return 0;
  }
  ShardSet set;
  set.name = "fuzz";
  set.shards.push_back(shard);
  ImportedModel model;
  try {
    model = ImportShardSet(set);
  } catch (const FormatError&) {
    return 0;  // e.g. a dtype APR v2 cannot hold: refused with a message
  }
  const std::string& prefix = model.plan.prefix;
  ReadAt read_at = [&](uint64_t offset, uint64_t length) -> std::string {
    // Only the prefix is in memory; data bytes read as zeros (their content is not checked).
    std::string out(length, '\0');
    if (offset < prefix.size()) {
      std::memcpy(out.data(), prefix.data() + offset,
                  std::min<uint64_t>(length, prefix.size() - offset));
    }
    return out;
  };
  AprFile apr = ReadAprFile(read_at, model.plan.total_size);  // a FormatError here is a bug
  if (!LintAprFile(apr, read_at).empty()) std::abort();
  if (apr.index.size() != model.plan.tensor_count) std::abort();
  return 0;
}
