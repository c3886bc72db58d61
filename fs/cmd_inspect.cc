#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "format/apr_reader.h"
#include "format/crc32.h"
#include "format/dtype.h"
#include "format/error.h"
#include "fs/commands.h"

namespace aprfs {
namespace {

struct InspectArgs {
  std::string file;
  bool json = false;
  bool quick = false;
};

class OpenFile {
 public:
  explicit OpenFile(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~OpenFile() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  std::string Read(uint64_t offset, uint64_t length) const {
    std::string out(length, '\0');
    uint64_t done = 0;
    while (done < length) {
      ssize_t n = pread(fd_, out.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("read failed: ") + std::strerror(errno));
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    out.resize(done);
    return out;
  }

 private:
  int fd_;
};

// CRC of [0, length), streamed.
uint32_t CrcOfPrefix(const OpenFile& file, uint64_t length) {
  constexpr uint64_t kChunk = 8 << 20;
  uint32_t crc = 0;
  for (uint64_t at = 0; at < length; at += kChunk) {
    std::string chunk = file.Read(at, std::min(kChunk, length - at));
    if (chunk.empty()) throw std::runtime_error("file ended early");
    crc = Crc32(chunk, crc);
  }
  return crc;
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string Hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08X", value);
  return text;
}

int RunInspect(const InspectArgs& args) {
  OpenFile file(args.file);
  struct stat st;
  if (file.fd() < 0 || fstat(file.fd(), &st) != 0) {
    std::cerr << "aprfs inspect: " << args.file << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  ReadAt read_at = [&](uint64_t offset, uint64_t length) { return file.Read(offset, length); };

  nlohmann::json report = {{"file", args.file}, {"size", size}};
  std::vector<std::string> problems;
  AprFile apr;
  try {
    apr = ReadAprFile(read_at, size);
    problems = LintAprFile(apr, read_at);
  } catch (const FormatError& e) {
    report["valid"] = false;
    report["errors"] = {std::string("rejected by the APR v2 reader: ") + e.what()};
    if (args.json) {
      std::cout << report.dump(2) << "\n";
    } else {
      std::cout << args.file << ": INVALID: rejected by the APR v2 reader: " << e.what() << "\n";
    }
    return 1;
  }

  std::string footer = "absent (allowed: readers do not need it)";
  if (apr.HasFooter() && !args.quick) {
    uint64_t end = apr.RequiredLength();
    uint32_t computed = CrcOfPrefix(file, end);
    std::string stored_bytes = file.Read(end, 4);
    uint32_t stored = static_cast<uint32_t>(LoadLe(stored_bytes, 0, 4));
    if (computed == stored) {
      footer = "ok " + Hex(stored);
    } else {
      footer = "MISMATCH: stored " + Hex(stored) + ", computed " + Hex(computed);
      problems.push_back("footer: " + footer);
    }
  } else if (apr.HasFooter()) {
    footer = "present, not checked (--quick)";
  }

  const AprHeaderFields& h = apr.header;
  report["header"] = {{"version", std::to_string(h.version_major) + "." +
                                      std::to_string(h.version_minor)},
                      {"flags", h.flags},
                      {"tensor_count", h.tensor_count},
                      {"metadata_offset", h.metadata_offset},
                      {"metadata_size", h.metadata_size},
                      {"tensor_index_offset", h.tensor_index_offset},
                      {"data_offset", h.data_offset},
                      {"checksum", Hex(h.checksum)}};
  report["footer"] = footer;
  nlohmann::json summary = nlohmann::json::object();
  for (const char* key : {"model_type", "name", "architecture", "hf_architecture", "source",
                          "param_count", "hidden_size", "num_layers", "vocab_size"}) {
    if (apr.metadata.contains(key)) summary[key] = apr.metadata[key];
  }
  if (apr.metadata.contains("tokenizer.vocabulary")) {
    summary["tokenizer.vocabulary"] = apr.metadata["tokenizer.vocabulary"].size();
  }
  if (apr.metadata.contains("tokenizer.merges")) {
    summary["tokenizer.merges"] = apr.metadata["tokenizer.merges"].size();
  }
  report["metadata"] = summary;
  report["valid"] = problems.empty();
  report["errors"] = problems;

  if (args.json) {
    nlohmann::json index = nlohmann::json::array();
    for (const AprIndexEntry& e : apr.index) {
      index.push_back({{"name", e.name},
                       {"dtype", std::string(AprDtypeName(e.dtype).value_or("?"))},
                       {"shape", e.shape},
                       {"offset", e.offset},
                       {"size", e.size}});
    }
    report["index"] = index;
    std::cout << report.dump(2) << "\n";
    return problems.empty() ? 0 : 1;
  }

  std::cout << args.file << ": APR v" << report["header"]["version"].get<std::string>() << ", "
            << HumanBytes(size) << ", " << h.tensor_count << " tensors, flags " << h.flags
            << ", metadata " << h.metadata_size << " bytes\n";
  for (const auto& [key, value] : summary.items()) {
    std::cout << "  " << key << ": " << value.dump() << "\n";
  }
  std::cout << "  footer: " << footer << "\n\n";
  std::cout << std::left << std::setw(56) << "TENSOR" << std::setw(6) << "DTYPE" << std::setw(20)
            << "SHAPE" << "OFFSET\n";
  for (const AprIndexEntry& e : apr.index) {
    std::cout << std::setw(56) << e.name << std::setw(6) << AprDtypeName(e.dtype).value_or("?")
              << std::setw(20) << ShapeText(e.shape) << e.offset << "\n";
  }
  if (problems.empty()) {
    std::cout << "\nvalid\n";
    return 0;
  }
  std::cout << "\nINVALID:\n";
  for (const std::string& problem : problems) std::cout << "  " << problem << "\n";
  return 1;
}

}  // namespace

void RegisterInspect(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Check an .apr file: header, metadata, index");
  cmd->add_option("FILE", args->file, "A mounted or materialized .apr file")->required();
  cmd->add_flag("--json", args->json, "Machine-readable output");
  cmd->add_flag("--quick", args->quick, "Skip the footer CRC (it reads the whole file)");
  cmd->callback([args, &exit_code] { exit_code = RunInspect(*args); });
}

}  // namespace aprfs
