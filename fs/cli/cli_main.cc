#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "fetch/hf_cache.h"
#include "fs/cli/config_file.h"
#include "fs/cli/commands.h"
#include "fs/cli/mount_helper.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace aprfs {

void SourceOptions::AddTo(CLI::App& app) {
  app.add_option("--hf-cache", hf_cache,
                 "Hugging Face hub cache to serve (default: $HF_HUB_CACHE, $HF_HOME/hub or "
                 "~/.cache/huggingface/hub)");
  app.add_flag("--no-hf-cache", no_hf_cache, "Do not serve models from the Hugging Face cache");
  // One value per --source, so `--source DIR MOUNTPOINT` leaves the mountpoint alone.
  app.add_option("--source", sources,
                 "A model folder, or a folder of model folders, local or in an S3 bucket "
                 "(s3://BUCKET/PREFIX) (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--repo", repos,
                 "A Hub model read lazily over HTTP: ORG/NAME[@REVISION] (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--config", config,
                 "JSON config file (default: ~/.config/aprfs/config.json when it exists)");
  app.add_option("--cache-dir", cache_dir,
                 "Cache of remote models' chunks and metadata and of computed views' bytes "
                 "(default: ~/.cache/aprfs)");
  app.add_option("--cache-size", cache_size,
                 "Size limit of the chunk cache (remote and computed chunks), e.g. 100G "
                 "(default: none); least recently used chunks are evicted");
  app.add_option("--max-connections", max_connections,
                 "Parallel HTTP connections for remote models (default: 8)")
      ->check(CLI::Range(1, 256));
  app.add_option("--max-memory", max_memory,
                 "Memory for remote models' chunks being downloaded and just downloaded, which "
                 "readers are served from, e.g. 128M (default: an eighth of RAM, at most 256M)");
  app.add_option("--views", views,
                 "Which files of each model a folder listing shows, from apr, q4k, f16, int8, "
                 "int4, safetensors, gguf, gguf-f16, gguf-bf16, gguf-f32, gguf-q8_0, "
                 "gguf-q4_k_m, or all "
                 "(separated by ',', ':' or '+'; default: apr,q4k); every view opens by name "
                 "whatever this says");
  app.add_flag("--no-view-cache", no_view_cache,
               "Do not keep computed bytes on disk: every byte of a view is computed on demand");
  app.add_option("--s3-endpoint", s3_endpoint,
                 "S3-compatible store of s3:// sources (default: $AWS_ENDPOINT_URL_S3, "
                 "$AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS)");
  app.add_option("--s3-region", s3_region,
                 "Region of s3:// sources (default: $AWS_REGION, the profile's, us-east-1)");
  app.add_option("--s3-profile", s3_profile,
                 "AWS profile of ~/.aws/credentials and ~/.aws/config (default: $AWS_PROFILE)");
  app.add_option("--s3-addressing", s3_addressing,
                 "auto, path (https://HOST/BUCKET/KEY) or virtual (https://BUCKET.HOST/KEY); "
                 "auto: virtual on AWS, path elsewhere")
      ->check(CLI::IsMember({"auto", "path", "virtual"}));
  app.add_option("--s3-rescan", s3_rescan,
                 "Seconds between listings of each s3:// source, in the background: models "
                 "added to or removed from the bucket appear or go within that (default: 60; "
                 "0: listed once, at mount)")
      ->check(CLI::Range(0, 86400));
  app.add_flag("--no-sign-request", no_sign_request,
               "Read s3:// sources anonymously (public buckets), even when credentials exist");
}

std::vector<ViewKind> ParseViewList(const std::string& text) {
  std::vector<ViewKind> views;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    if (item == "all") {
      views.assign(kAllViews.begin(), kAllViews.end());
    } else if (std::optional<ViewKind> view = ParseViewName(item)) {
      if (std::find(views.begin(), views.end(), *view) == views.end()) views.push_back(*view);
    } else {
      throw std::runtime_error("--views " + text + ": unknown view '" + item + "' (known: " +
                               KnownViewNames() + ", all)");
    }
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ':' || c == '+' || c == ' ') {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return views;
}

namespace {

std::string DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/aprfs";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/aprfs";
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  return std::filesystem::absolute(path, ec).string();
}

// The AWS environment and profiles, overridden by the command line, then the config file.
S3Config S3ConfigOf(const SourceOptions& args, const ConfigFile& file) {
  auto pick = [](const std::string& given, const std::optional<std::string>& configured) {
    return !given.empty() ? std::optional<std::string>(given) : configured;
  };
  S3Overrides overrides;
  overrides.profile = pick(args.s3_profile, file.s3_profile);
  overrides.region = pick(args.s3_region, file.s3_region);
  overrides.endpoint = pick(args.s3_endpoint, file.s3_endpoint);
  if (std::optional<std::string> style = pick(args.s3_addressing, file.s3_addressing)) {
    if (*style == "path") {
      overrides.addressing = S3Addressing::kPath;
    } else if (*style == "virtual") {
      overrides.addressing = S3Addressing::kVirtualHost;
    } else if (*style == "auto") {
      overrides.addressing = S3Addressing::kAuto;
    } else {
      throw std::runtime_error("s3_addressing " + *style + ": expected auto, path or virtual");
    }
  }
  overrides.anonymous = args.no_sign_request || file.no_sign_request.value_or(false);
  try {
    return ResolveS3Config(AwsEnvironment::Process(), overrides);
  } catch (const AwsConfigError& e) {
    throw std::runtime_error(std::string("S3 configuration: ") + e.what());
  }
}

}  // namespace

CatalogOptions SourceOptions::ToCatalogOptions() const {
  ConfigFile file;
  std::error_code ec;
  if (!config.empty()) {
    file = LoadConfigFile(config);
  } else if (std::filesystem::exists(DefaultConfigPath(), ec)) {
    file = LoadConfigFile(DefaultConfigPath());
  }
  CatalogOptions options;
  if (!no_hf_cache && !file.no_hf_cache.value_or(false)) {
    options.hf_cache = Absolute(!hf_cache.empty() ? hf_cache : file.hf_cache.value_or(DefaultHfHubCache()));
  }
  std::vector<std::string> all_sources = file.sources;
  all_sources.insert(all_sources.end(), sources.begin(), sources.end());
  for (const std::string& source : all_sources) {
    if (source.rfind("s3://", 0) != 0) {
      options.sources.push_back(Absolute(source));
      continue;
    }
    std::string why;
    std::optional<S3Uri> uri = ParseS3Uri(source, &why);
    if (!uri) throw std::runtime_error("--source " + source + ": " + why);
    options.s3_sources.push_back(*uri);
  }
  std::vector<std::string> all_repos = file.repos;
  all_repos.insert(all_repos.end(), repos.begin(), repos.end());
  for (const std::string& text : all_repos) {
    std::optional<RemoteRepoSpec> spec = ParseRepoSpec(text);
    if (!spec) {
      throw std::runtime_error("--repo " + text + ": expected ORG/NAME[@REVISION] with a valid "
                               "repo id (letters, digits, '-', '_', '.')");
    }
    options.repos.push_back(*spec);
  }
  const std::string views_text = !views.empty() ? views : file.views.value_or("apr,q4k");
  options.listed_views = ParseViewList(views_text);
  const std::string dir =
      Absolute(!cache_dir.empty() ? cache_dir : file.cache_dir.value_or(DefaultCacheDir()));
  std::string size = !cache_size.empty() ? cache_size : file.cache_size.value_or("");
  if (!size.empty()) {
    std::optional<uint64_t> bytes = ParseSize(size);
    if (!bytes) throw std::runtime_error("--cache-size " + size + ": expected a size like 100G");
    options.cache_limit = *bytes;
  }
  if (!no_view_cache && file.view_cache.value_or(true)) options.computed_cache_dir = dir;
  if (options.repos.empty() && options.s3_sources.empty()) return options;
  if (!options.s3_sources.empty()) options.s3 = S3ConfigOf(*this, file);
  const int rescan = s3_rescan >= 0 ? s3_rescan : file.s3_rescan.value_or(60);
  options.s3_rescan_interval = std::chrono::seconds(rescan);
  RemoteSettings& settings = options.remote;
  settings.cache_dir = dir;
  settings.cache_limit = options.cache_limit;
  settings.connections = max_connections ? max_connections : file.max_connections.value_or(8);
  const std::string memory = !max_memory.empty() ? max_memory : file.max_memory.value_or("");
  if (!memory.empty()) {
    std::optional<uint64_t> bytes = ParseSize(memory);
    if (!bytes || *bytes < (16u << 20)) {
      throw std::runtime_error("--max-memory " + memory + ": expected a size of at least 16M, "
                               "like 512M");
    }
    settings.memory_limit = *bytes;
  }
  settings.hf_cache = options.hf_cache;
  options.hub = HubConfig::FromEnvironment();
  return options;
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
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
  aprfs::RegisterStatus(app, exit_code);
  aprfs::RegisterPrefetch(app, exit_code);
  aprfs::RegisterVerify(app, exit_code);
  aprfs::SetUpLogging("warn", "");
  // mount(8)'s helper call and `aprfs mount -o source=...` become plain `aprfs mount` options.
  aprfs::CommandLine line = aprfs::RewriteCommandLine(argc, argv);
  if (line.exit_code >= 0) return line.exit_code;
  std::vector<char*> args;
  for (std::string& arg : line.argv) args.push_back(arg.data());
  CLI11_PARSE(app, static_cast<int>(args.size()), args.data());
  return exit_code;
}
