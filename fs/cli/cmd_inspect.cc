#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "format/apr/apr_reader.h"
#include "format/safetensors/dtype.h"
#include "format/error.h"
#include "fs/cli/apr_check.h"
#include "fs/cli/commands.h"
#include "fs/cli/inspect_gguf.h"
#include "fs/cli/inspect_safetensors.h"

namespace aprfs {
namespace {

struct InspectArgs {
  std::string file;
  bool json = false;
  bool quick = false;
};

// Closes the file when inspect returns.
class OpenFile {
 public:
  explicit OpenFile(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~OpenFile() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

int RunInspect(const InspectArgs& args) {
  OpenFile file(args.file);
  struct stat st;
  if (file.fd() < 0 || fstat(file.fd(), &st) != 0) {
    std::cerr << "aprfs inspect: " << args.file << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  ReadAt read_at = FileReadAt(file.fd());

  nlohmann::json report = {{"file", args.file}, {"size", size}};
  AprCheck check;
  try {
    const std::string first = read_at(0, 9);
    if (first.compare(0, 4, "GGUF") == 0) return InspectGguf(args.file, read_at, size, args.json);
    if (LooksLikeSafetensors(first)) return InspectSafetensors(args.file, read_at, size, args.json);
    check = CheckAprFile(read_at, size, !args.quick);
  } catch (const std::exception& e) {
    std::cerr << "aprfs inspect: " << args.file << ": " << e.what() << "\n";
    return 1;
  }
  if (!check.file) {
    report["valid"] = false;
    report["errors"] = check.problems;
    if (args.json) {
      std::cout << report.dump(2) << "\n";
    } else {
      std::cout << args.file << ": INVALID: " << check.problems.front() << "\n";
    }
    return 1;
  }
  const AprFile& apr = *check.file;
  const std::vector<std::string>& problems = check.problems;
  std::string footer = check.footer;
  if (args.quick && apr.HasFooter()) footer = "present, not checked (--quick)";

  const AprHeaderFields& h = apr.header;
  report["header"] = {{"version", std::to_string(h.version_major) + "." +
                                      std::to_string(h.version_minor)},
                      {"flags", h.flags},
                      {"tensor_count", h.tensor_count},
                      {"metadata_offset", h.metadata_offset},
                      {"metadata_size", h.metadata_size},
                      {"tensor_index_offset", h.tensor_index_offset},
                      {"data_offset", h.data_offset},
                      {"checksum", Hex32(h.checksum)}};
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
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Check an .apr file (header, metadata, index), a .gguf or a .safetensors file");
  cmd->add_option("FILE", args->file, "A mounted or materialized .apr, .gguf or .safetensors file")
      ->required();
  cmd->add_flag("--json", args->json, "Machine-readable output");
  cmd->add_flag("--quick", args->quick, "Skip the footer CRC (it reads the whole file)");
  cmd->callback([args, &exit_code] { exit_code = RunInspect(*args); });
}

}  // namespace aprfs
