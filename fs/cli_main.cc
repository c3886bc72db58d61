#include <spdlog/spdlog.h>

#include <filesystem>

#include "fetch/hf_cache.h"
#include "fs/commands.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace aprfs {

void SourceOptions::AddTo(CLI::App& app) {
  app.add_option("--hf-cache", hf_cache,
                 "Hugging Face hub cache to serve (default: $HF_HUB_CACHE, $HF_HOME/hub or "
                 "~/.cache/huggingface/hub)");
  app.add_flag("--no-hf-cache", no_hf_cache, "Do not serve models from the Hugging Face cache");
  // One value per --source, so `--source DIR MOUNTPOINT` leaves the mountpoint alone.
  app.add_option("--source", sources, "A model folder, or a folder of model folders (repeatable)")
      ->allow_extra_args(false);
}

CatalogOptions SourceOptions::ToCatalogOptions() const {
  CatalogOptions options;
  if (!no_hf_cache) {
    options.hf_cache = hf_cache.empty() ? DefaultHfHubCache() : hf_cache;
    std::error_code ec;
    options.hf_cache = std::filesystem::absolute(*options.hf_cache, ec).string();
  }
  for (const std::string& source : sources) {
    std::error_code ec;
    options.sources.push_back(std::filesystem::absolute(source, ec).string());
  }
  return options;
}

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

void SetUpLogging(const std::string& level, const std::string& file) {
  std::shared_ptr<spdlog::logger> logger =
      file.empty() ? std::make_shared<spdlog::logger>(
                         "aprfs", std::make_shared<spdlog::sinks::stderr_sink_mt>())
                   : std::make_shared<spdlog::logger>(
                         "aprfs", std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace aprfs

int main(int argc, char** argv) {
  CLI::App app{"aprfs: sharded safetensors models as virtual APR v2 files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "aprfs 0.1.0");
  int exit_code = 0;
  aprfs::RegisterMount(app, exit_code);
  aprfs::RegisterUmount(app, exit_code);
  aprfs::RegisterLs(app, exit_code);
  aprfs::RegisterInspect(app, exit_code);
  aprfs::SetUpLogging("warn", "");
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
