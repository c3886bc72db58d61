// ReadAprFile's checks and messages in aprender's order (apr-v2-format.md §10.1) and
// LintAprFile, on files built with BuildAprPlan, materialized, then corrupted by hand. The
// header checksum is recomputed here with zlib and the index is walked with this file's own
// parser, so corruptions do not depend on the code under test.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "format/apr/apr_metadata.h"
#include "format/apr/apr_plan.h"
#include "format/apr/apr_reader.h"
#include "format/error.h"
#include "tests/support/materialize.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using nlohmann::json;
using testing::MakeTensor;
using testing::TestTensor;

uint32_t Zcrc(std::string_view bytes, uint32_t crc = 0) {
  return static_cast<uint32_t>(
      crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

void PutLe(std::string& file, size_t at, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) file[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

uint64_t GetLe(const std::string& file, size_t at, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(file[at + i]);
  return v;
}

// Header field positions (§3).
constexpr size_t kFlags = 6, kTensorCount = 8, kMetaOffset = 12, kMetaSize = 20,
                 kIndexOffset = 24, kDataOffset = 32, kChecksum = 40;

void Rechecksum(std::string& file) {
  uint32_t crc = Zcrc(std::string_view(file).substr(0, 40));
  crc = Zcrc(std::string_view(file).substr(44, 20), crc);
  PutLe(file, kChecksum, crc, 4);
}

// One index entry as laid out in the file.
struct RawEntry {
  size_t start = 0;
  std::string name;
  size_t dtype_at = 0;
  size_t ndim = 0;
  size_t offset_at = 0;
  size_t end = 0;
};

std::vector<RawEntry> WalkIndex(const std::string& file) {
  std::vector<RawEntry> entries;
  size_t at = GetLe(file, kIndexOffset, 8);
  uint64_t count = GetLe(file, kTensorCount, 4);
  for (uint64_t i = 0; i < count; ++i) {
    RawEntry e;
    e.start = at;
    size_t n = GetLe(file, at, 2);
    e.name = file.substr(at + 2, n);
    e.dtype_at = at + 2 + n;
    e.ndim = static_cast<uint8_t>(file[at + 3 + n]);
    e.offset_at = at + 4 + n + 8 * e.ndim;
    e.end = e.offset_at + 16;
    at = e.end;
    entries.push_back(e);
  }
  return entries;
}

ReadAt ReadAtString(const std::string& bytes) {
  return [&bytes](uint64_t offset, uint64_t length) -> std::string {
    if (offset >= bytes.size()) return {};
    return bytes.substr(offset, length);
  };
}

AprFile Read(const std::string& file) { return ReadAprFile(ReadAtString(file), file.size()); }

// A file holding `tensors` (dtype codes given) with the given metadata text.
std::string BuildFile(const std::string& metadata_json, const std::vector<TestTensor>& tensors,
                      const std::vector<uint8_t>& codes,
                      const std::vector<uint64_t>& sizes_override = {}) {
  std::vector<AprTensorSpec> specs;
  std::vector<std::string> payloads;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t size = sizes_override.empty() ? tensors[i].bytes.size() : sizes_override[i];
    specs.push_back({tensors[i].name, codes[i], tensors[i].shape, size, static_cast<uint32_t>(i),
                     0, std::nullopt});
    payloads.push_back(tensors[i].bytes + std::string(size > tensors[i].bytes.size()
                                                          ? size - tensors[i].bytes.size()
                                                          : 0,
                                                      '\x11'));
  }
  return testing::MaterializePlan(BuildAprPlan(metadata_json, specs), payloads);
}

std::string BaseMetadata() {
  AprMetadata m;
  m.model_type = "Llama";
  m.name = "reader-test";
  m.hidden_size = 4;
  m.param_count = 32;
  return SerializeAprMetadata(m);
}

// Names sort as a.bias < b.norm < c.weight; the 3-D tensor is the last index entry.
std::vector<TestTensor> BaseTensors() {
  return {MakeTensor("c.weight", "F32", {2, 3, 4}), MakeTensor("a.bias", "F32", {3}),
          MakeTensor("b.norm", "BF16", {5})};
}

std::string ValidFile(const std::string& metadata = BaseMetadata()) {
  return BuildFile(metadata, BaseTensors(), {0, 0, 30});
}

void ExpectReadError(const std::string& file, const std::string& message) {
  try {
    AprFile parsed = Read(file);
    ADD_FAILURE() << "accepted; expected \"" << message << "\"";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << "expected \"" << message << "\", got \"" << e.what() << "\"";
  }
}

// ---------------------------------------------------------------------------------------------

TEST(AprReader, ValidFileParses) {
  std::string file = ValidFile();
  ASSERT_NE(GetLe(file, kMetaSize, 4) % 64, 0u) << "the metadata needs padding for later tests";
  AprFile apr = Read(file);
  EXPECT_EQ(apr.file_size, file.size());
  EXPECT_EQ(apr.header.tensor_count, 3u);
  EXPECT_EQ(apr.header.flags, 0x0400);
  EXPECT_EQ(apr.header.metadata_offset, 64u);
  EXPECT_EQ(apr.header.checksum, apr.expected_checksum);
  ASSERT_EQ(apr.index.size(), 3u);
  EXPECT_EQ(apr.index[0].name, "a.bias");
  EXPECT_EQ(apr.index[1].name, "b.norm");
  EXPECT_EQ(apr.index[2].name, "c.weight");
  EXPECT_EQ(apr.index[2].shape, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(apr.index[1].dtype, 30);
  // Data in the given order: c.weight (96 bytes) at 0, a.bias at 128, b.norm at 192.
  EXPECT_EQ(apr.index[2].offset, 0u);
  EXPECT_EQ(apr.index[0].offset, 128u);
  EXPECT_EQ(apr.index[1].offset, 192u);
  EXPECT_EQ(apr.index[1].size, 10u);
  EXPECT_EQ(apr.index_end, WalkIndex(file).back().end);
  EXPECT_EQ(apr.metadata.at("name"), "reader-test");
  EXPECT_EQ(apr.RequiredLength(), apr.header.data_offset + 256);
  EXPECT_TRUE(apr.HasFooter());
  EXPECT_EQ(LintAprFile(apr, ReadAtString(file)), std::vector<std::string>{});
}

TEST(AprReader, FooterIsOptional) {
  std::string file = ValidFile();
  file.resize(file.size() - 4);
  AprFile apr = Read(file);
  EXPECT_FALSE(apr.HasFooter());
  EXPECT_EQ(LintAprFile(apr, ReadAtString(file)), std::vector<std::string>{});
}

TEST(AprReader, FileShorterThan64Bytes) {
  std::string file = ValidFile();
  ExpectReadError("", "Invalid header: file too small");
  ExpectReadError(file.substr(0, 1), "Invalid header: file too small");
  ExpectReadError(file.substr(0, 63), "Invalid header: file too small");
}

TEST(AprReader, BadMagicComesBeforeTheChecksum) {
  std::string file = ValidFile();
  std::string apr2 = file;
  apr2[3] = '2';  // legacy "APR2": the checksum is now stale too, magic is reported first
  ExpectReadError(apr2, "Invalid magic: 41505232");
  std::string gguf = file;
  gguf.replace(0, 4, "GGUF");
  Rechecksum(gguf);
  ExpectReadError(gguf, "Invalid magic: 47475546");
  std::string binary = file;
  binary.replace(0, 4, "\xde\xad\xbe\xef");
  ExpectReadError(binary, "Invalid magic: deadbeef");  // lowercase hex
}

TEST(AprReader, ChecksumMismatch) {
  std::string file = ValidFile();
  std::string reserved = file;
  reserved[50] = 1;  // reserved bytes are covered by the checksum
  ExpectReadError(reserved, "Checksum mismatch");
  std::string stored = file;
  stored[kChecksum] ^= 0x01;
  ExpectReadError(stored, "Checksum mismatch");
  std::string count = file;
  PutLe(count, kTensorCount, 2, 4);
  ExpectReadError(count, "Checksum mismatch");
  std::string version = file;
  version[5] = 1;
  ExpectReadError(version, "Checksum mismatch");
  Rechecksum(version);
  EXPECT_NO_THROW(Read(version));  // the version is not checked at load
}

TEST(AprReader, ColumnMajorFlag) {
  std::string file = ValidFile();
  PutLe(file, kFlags, 0x0400 | 0x0800, 2);
  ExpectReadError(file, "Checksum mismatch");  // the checksum comes first
  Rechecksum(file);
  ExpectReadError(file, "LAYOUT-002");
  ExpectReadError(file, "LAYOUT_COLUMN_MAJOR");
  // Other flags are not checked at load; the lint reports compression bits.
  std::string lz4 = ValidFile();
  PutLe(lz4, kFlags, 0x0400 | 0x0001, 2);
  Rechecksum(lz4);
  AprFile apr = Read(lz4);
  std::vector<std::string> problems = LintAprFile(apr, ReadAtString(lz4));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("compression"), std::string::npos) << problems[0];
}

TEST(AprReader, MetadataPastEndOfFile) {
  std::string file = ValidFile();
  std::string size = file;
  PutLe(size, kMetaSize, file.size(), 4);
  Rechecksum(size);
  ExpectReadError(size, "Invalid header: file too small for metadata");
  std::string offset = file;
  PutLe(offset, kMetaOffset, file.size() - 10, 8);
  Rechecksum(offset);
  ExpectReadError(offset, "Invalid header: file too small for metadata");
  std::string overflow = file;
  PutLe(overflow, kMetaOffset, ~uint64_t{0} - 5, 8);
  Rechecksum(overflow);
  ExpectReadError(overflow, "Invalid header: metadata offset+size overflow");
  // The metadata check comes before the index: a broken index is not reported.
  std::string both = size;
  PutLe(both, kIndexOffset, ~uint64_t{0}, 8);
  Rechecksum(both);
  ExpectReadError(both, "file too small for metadata");
}

TEST(AprReader, MetadataWithWrongTypes) {
  const std::vector<TestTensor> tensors = {MakeTensor("w", "F32", {2})};
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model_type":"x","param_count":"12"})", "param_count"},
      {R"({"model_type":"x","hidden_size":4096.0})", "hidden_size"},
      {R"({"model_type":null})", "model_type"},
      {R"({"model_type":7})", "model_type"},
      {R"({"model_type":"x","quantization":{"quant_type":"q8","symmetric":true}})", "bits"},
      {R"({"quantization":{"quant_type":"q8","bits":300,"symmetric":true}})", "bits"},
      {R"({"quantization":{"bits":8,"symmetric":true}})", "quant_type"},
      {R"({"quantization":{"quant_type":"q8","bits":8}})", "symmetric"},
      {R"({"quantization":[1]})", "quantization"},
      {R"({"sharding":{"shard_count":2,"shard_index":0}})", "total_size"},
      {R"({"special_tokens":{"bos_token":1}})", "bos_token"},
      {R"({"name":5})", "name"},
      {R"({"license":false})", "license"},
      {R"({"rope_type":4294967296})", "rope_type"},
      {R"({"rope_theta":"10000"})", "rope_theta"},
      {R"({"total_size":-1})", "total_size"},
      {R"({"num_layers":-2})", "num_layers"},
      {R"({"vocab_size":1e5})", "vocab_size"},
      {"{", "Metadata error"},
      {"[]", "Metadata error"},
      {"", "Metadata error"},
      {"\"text\"", "Metadata error"},
  };
  for (const auto& [metadata, needle] : cases) {
    SCOPED_TRACE(metadata);
    std::string file = BuildFile(metadata, tensors, {0});
    try {
      Read(file);
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      std::string message = e.what();
      EXPECT_EQ(message.rfind("Metadata error", 0), 0u) << message;
      EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
  }
}

TEST(AprReader, MetadataAcceptedAsAprenderDoes) {
  const std::vector<TestTensor> tensors = {MakeTensor("w", "F32", {2})};
  AprFile empty = Read(BuildFile("{}", tensors, {0}));
  EXPECT_TRUE(empty.metadata.is_object());
  AprFile dup = Read(BuildFile(R"({"model_type":"a","model_type":"b","x":1,"x":2})", tensors, {0}));
  EXPECT_EQ(dup.metadata.at("model_type"), "b");  // last wins
  EXPECT_EQ(dup.metadata.at("x"), 2);
  AprFile nulls = Read(BuildFile(
      R"({"name":null,"hidden_size":null,"quantization":null,"rope_theta":10000,)"
      R"("rms_norm_eps":1e-6,"custom_key":[1,{"a":null}],"quantization":{"quant_type":"q4",)"
      R"("bits":4,"symmetric":false}})",
      tensors, {0}));
  EXPECT_EQ(nulls.metadata.at("quantization").at("bits"), 4);
  Read(BuildFile(R"({"special_tokens":{"bos_token":null},"sharding":{"shard_count":1,)"
                 R"("shard_index":0,"total_size":0,"pattern":null}})",
                 tensors, {0}));
}

TEST(AprReader, TensorIndexOffsetPastEndOfFile) {
  std::string file = ValidFile();
  PutLe(file, kIndexOffset, file.size() + 1, 8);
  Rechecksum(file);
  ExpectReadError(file, "Invalid tensor index: tensor index offset past end of file");
}

TEST(AprReader, TruncatedIndexEntries) {
  const std::string file = ValidFile();
  std::vector<RawEntry> entries = WalkIndex(file);
  ASSERT_EQ(entries.size(), 3u);
  const RawEntry& c = entries[2];  // "c.weight": name_len 8, ndim 3
  ASSERT_EQ(c.name, "c.weight");
  ASSERT_EQ(c.ndim, 3u);
  const size_t e = c.start;
  const struct {
    size_t length;
    const char* message;
  } cases[] = {
      {entries[0].start, "Invalid tensor index: buffer too small"},  // 0 bytes for entry 0
      {e, "Invalid tensor index: buffer too small"},                 // 7a: 0 bytes
      {e + 3, "Invalid tensor index: buffer too small"},             // 7a: 3 < 4
      {e + 4, "Invalid tensor index: buffer too small for name"},    // 7b
      {e + 2 + 8 + 18 - 1, "Invalid tensor index: buffer too small for name"},
      {e + 12 + 16, "Invalid tensor index: buffer too small for shape"},  // 7d: 16 < 24
      {e + 12 + 23, "Invalid tensor index: buffer too small for shape"},
      {e + 12 + 24, "Invalid tensor index: buffer too small for offset/size"},  // 7e: 0 < 16
      {e + 12 + 24 + 15, "Invalid tensor index: buffer too small for offset/size"},
  };
  for (const auto& c7 : cases) {
    SCOPED_TRACE(c7.length);
    ExpectReadError(file.substr(0, c7.length), c7.message);
  }
  // 7a's message is exactly aprender's (the others only extend it).
  try {
    Read(file.substr(0, e + 3));
  } catch (const FormatError& e2) {
    EXPECT_EQ(std::string(e2.what()), "Invalid tensor index: buffer too small");
  }
  // Complete entries with the data cut off still parse (extents are not checked at load).
  AprFile cut = Read(file.substr(0, c.end));
  EXPECT_EQ(cut.index.size(), 3u);
  EXPECT_FALSE(LintAprFile(cut, ReadAtString(file)).empty());
}

TEST(AprReader, InvalidDtypeCodes) {
  const std::string file = ValidFile();
  RawEntry b = WalkIndex(file)[1];
  for (int code : {2, 13, 10, 11, 15, 31, 127, 130, 255}) {
    SCOPED_TRACE(code);
    std::string bad = file;
    bad[b.dtype_at] = static_cast<char>(code);
    ExpectReadError(bad, "Invalid tensor index: invalid dtype");
  }
  // Every code aprender knows is accepted, including legacy 8/9.
  for (int code : {0, 1, 3, 4, 5, 6, 7, 8, 9, 12, 14, 30, 128, 129}) {
    SCOPED_TRACE(code);
    std::string ok = file;
    ok[b.dtype_at] = static_cast<char>(code);
    AprFile apr = Read(ok);
    EXPECT_EQ(apr.index[1].dtype, code);
  }
}

TEST(AprReader, UnsortedNames) {
  const std::string file = ValidFile();
  std::vector<RawEntry> entries = WalkIndex(file);
  std::string swapped = file;
  swapped.replace(entries[0].start + 2, 6, "b.norm");
  swapped.replace(entries[1].start + 2, 6, "a.bias");
  ExpectReadError(swapped, "Invalid tensor index: tensor index not sorted");
  // Equal neighbours are allowed by the reader; the lint reports them.
  std::string dup = file;
  dup.replace(entries[1].start + 2, 6, "a.bias");
  AprFile apr = Read(dup);
  std::vector<std::string> problems = LintAprFile(apr, ReadAtString(dup));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("'a.bias'"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("twice"), std::string::npos) << problems[0];
}

TEST(AprReader, ByteWiseOrderOfNonAsciiNames) {
  // 0xC3 sorts after 'z' when bytes are compared unsigned, as Rust's String ordering does.
  std::string file = BuildFile("{}", {MakeTensor("\xc3\xa9t\xc3\xa9", "U8", {1}),
                                      MakeTensor("zeta", "U8", {1}), MakeTensor("Z", "U8", {1})},
                               {7, 7, 7});
  AprFile apr = Read(file);
  ASSERT_EQ(apr.index.size(), 3u);
  EXPECT_EQ(apr.index[0].name, "Z");
  EXPECT_EQ(apr.index[1].name, "zeta");
  EXPECT_EQ(apr.index[2].name, "\xc3\xa9t\xc3\xa9");
}

TEST(AprReader, ForgedHugeTensorCountFailsQuickly) {
  std::string file = ValidFile();
  PutLe(file, kTensorCount, 0xFFFFFFFFu, 4);
  Rechecksum(file);
  uint64_t asked = 0;
  ReadAt counting = [&](uint64_t offset, uint64_t length) {
    asked += length;
    return offset >= file.size() ? std::string() : file.substr(offset, length);
  };
  auto start = std::chrono::steady_clock::now();
  try {
    ReadAprFile(counting, file.size());
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("Invalid tensor index: ", 0), 0u) << e.what();
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The behaviour is `asked`; the time only catches a loop over 4 billion entries (wide: a
  // sanitizer and a busy machine slow it down).
  EXPECT_LT(seconds, 30.0);
  EXPECT_LT(asked, 64u * file.size() + (4u << 20)) << "read far more than the file";
}

// The forged count must not turn into a giant reserve(): run the reader in a child whose
// address space may grow by at most 512 MiB.
TEST(AprReader, ForgedTensorCountDoesNotAllocateGigabytes) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "RLIMIT_AS cannot be used with ASan's shadow memory";
#else
  std::string file = ValidFile();
  PutLe(file, kTensorCount, 50'000'000, 4);  // 50M entries would be several GB of structs
  Rechecksum(file);
  std::fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0;
    if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
      std::fclose(statm);
    }
    rlim_t limit = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (512ull << 20);
    rlimit lim{limit, limit};
    setrlimit(RLIMIT_AS, &lim);
    int code = 5;
    try {
      ReadAprFile(ReadAtString(file), file.size());
      code = 1;
    } catch (const FormatError&) {
      code = 0;
    } catch (const std::bad_alloc&) {
      code = 3;
    } catch (...) {
      code = 4;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died, status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: accepted, 3: bad_alloc (reserved for the forged count), 4: other exception";
#endif
}

// ---------------------------------------------------------------------------------------------
// LintAprFile.

bool HasProblem(const std::vector<std::string>& problems, const std::string& needle) {
  for (const std::string& p : problems) {
    if (p.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string Joined(const std::vector<std::string>& problems) {
  std::string out;
  for (const std::string& p : problems) out += p + "\n";
  return out;
}

TEST(AprLint, TensorPastEndOfFile) {
  std::string file = ValidFile();
  AprFile full = Read(file);
  std::string cut = file.substr(0, full.header.data_offset + 130);  // inside a.bias
  AprFile apr = Read(cut);
  std::vector<std::string> problems = LintAprFile(apr, ReadAtString(cut));
  EXPECT_TRUE(HasProblem(problems, "tensor 'b.norm': payload runs past the end of the file"))
      << Joined(problems);
  EXPECT_TRUE(HasProblem(problems, "tensor 'a.bias': payload runs past the end of the file"))
      << Joined(problems);
  EXPECT_FALSE(HasProblem(problems, "tensor 'c.weight'")) << Joined(problems);
  EXPECT_TRUE(HasProblem(problems, "required_file_len")) << Joined(problems);
}

TEST(AprLint, MisalignedOffset) {
  std::string file = ValidFile();
  RawEntry c = WalkIndex(file)[2];
  PutLe(file, c.offset_at, 4, 8);  // c.weight at data_offset + 4
  AprFile apr = Read(file);
  std::vector<std::string> problems = LintAprFile(apr, ReadAtString(file));
  EXPECT_TRUE(HasProblem(problems, "tensor 'c.weight': offset is not a multiple of 64"))
      << Joined(problems);
}

TEST(AprLint, NonZeroPadding) {
  std::string file = ValidFile();
  AprFile apr = Read(file);
  uint64_t meta_end = apr.header.metadata_offset + apr.header.metadata_size;
  ASSERT_LT(meta_end, apr.header.tensor_index_offset);
  std::string meta_pad = file;
  meta_pad[apr.header.tensor_index_offset - 1] = 'x';
  std::vector<std::string> problems = LintAprFile(Read(meta_pad), ReadAtString(meta_pad));
  EXPECT_TRUE(HasProblem(problems, "metadata: padding bytes are not zero")) << Joined(problems);

  ASSERT_LT(apr.index_end, apr.header.data_offset);
  std::string index_pad = file;
  index_pad[apr.index_end] = 1;
  problems = LintAprFile(Read(index_pad), ReadAtString(index_pad));
  EXPECT_TRUE(HasProblem(problems, "index: padding bytes are not zero")) << Joined(problems);
}

TEST(AprLint, AliasKeyInMetadata) {
  for (const char* alias : {"num_hidden_layers", "n_embd", "num_key_value_heads", "n_ctx",
                            "layer_norm_eps", "intermediate_dim"}) {
    std::string metadata = std::string(R"({"model_type":"x","num_layers":2,")") + alias + "\":2}";
    std::string file = BuildFile(metadata, {MakeTensor("w", "F32", {2})}, {0});
    std::vector<std::string> problems = LintAprFile(Read(file), ReadAtString(file));
    EXPECT_TRUE(HasProblem(problems, std::string("alias key `") + alias + "`"))
        << alias << "\n" << Joined(problems);
  }
}

TEST(AprLint, SizeDisagreesWithShapeAndDtype) {
  std::string file = BuildFile("{}", {MakeTensor("w", "F32", {2, 3}), MakeTensor("v", "F16", {4})},
                               {0, 1}, {20, 8});
  std::vector<std::string> problems = LintAprFile(Read(file), ReadAtString(file));
  EXPECT_TRUE(HasProblem(problems, "tensor 'w': size 20 but dtype and shape need 24"))
      << Joined(problems);
  EXPECT_FALSE(HasProblem(problems, "tensor 'v'")) << Joined(problems);
}

TEST(AprLint, FileLengthNeitherRequiredNorWithFooter) {
  std::string file = ValidFile() + "x";
  std::vector<std::string> problems = LintAprFile(Read(file), ReadAtString(file));
  EXPECT_TRUE(HasProblem(problems, "neither required_file_len nor")) << Joined(problems);
}

TEST(AprPayloadSize, PlainDtypesAndBlockFormats) {
  EXPECT_EQ(AprPayloadSize(0, {2, 3}), 24u);
  EXPECT_EQ(AprPayloadSize(30, {5}), 10u);
  EXPECT_EQ(AprPayloadSize(3, {}), 8u);
  EXPECT_EQ(AprPayloadSize(7, {4, 0}), 0u);
  EXPECT_FALSE(AprPayloadSize(12, {256}).has_value());
  EXPECT_FALSE(AprPayloadSize(128, {32}).has_value());
  EXPECT_FALSE(AprPayloadSize(0, {uint64_t{1} << 62, 8}).has_value());  // overflow
}

}  // namespace
}  // namespace aprfs
