#include "fs/status_render.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>

namespace aprfs {
namespace {

// Fields in the order written, so the file reads top-down for people.
using json = nlohmann::ordered_json;

template <typename T>
json OrNull(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// "2024-05-01T12:34:56.789Z".
std::string Iso8601(int64_t ns) {
  std::time_t seconds = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof(text) - n, ".%03dZ", static_cast<int>((ns / 1'000'000) % 1000));
  return text;
}

json ShardJson(const ShardStatus& shard) {
  return {{"file", shard.file},
          {"size", shard.size},
          {"sha256", OrNull(shard.sha256)},
          {"local_path", OrNull(shard.local_path)},
          {"cached_bytes", shard.cached_bytes},
          {"published", OrNull(shard.published)},
          {"cache_error", OrNull(shard.cache_error)}};
}

json ViewJson(const ViewStatus& view) {
  return {{"view", view.view},
          {"file", view.file},
          {"state", view.state},
          {"error", view.error.empty() ? json(nullptr) : json(view.error)},
          {"size", OrNull(view.size)},
          {"bytes_read", view.bytes_read},
          {"reads", view.reads},
          {"errors", view.errors},
          {"bytes_computed", view.bytes_computed},
          {"source_bytes_encoded", view.source_bytes_encoded},
          {"encode_seconds", static_cast<double>(view.encode_ns) / 1e9},
          {"encode_bytes_per_second", view.EncodeBytesPerSecond()},
          {"cache_hits", view.cache_hits},
          {"cache_misses", view.cache_misses},
          {"cache_stored_bytes", view.cache_stored_bytes},
          {"cache_pending_bytes", view.cache_pending_bytes},
          {"cached_bytes", OrNull(view.cached_bytes)}};
}

json ModelJson(const ModelStatus& model) {
  json shards = json::array();
  for (const ShardStatus& shard : model.shards) shards.push_back(ShardJson(shard));
  json views = json::array();
  for (const ViewStatus& view : model.views) views.push_back(ViewJson(view));
  json out = {{"name", model.names.empty() ? json(nullptr) : json(model.names.front())},
              {"names", model.names},
              {"key", model.key},
              {"kind", model.kind},
              {"source", model.source},
              {"revision", OrNull(model.revision)},
              {"state", model.state},
              {"error", model.error.empty() ? json(nullptr) : json(model.error)},
              {"size", OrNull(model.size)},
              {"tensors", OrNull(model.tensors)},
              {"shards", shards},
              {"cached_bytes", model.cached_bytes},
              {"bytes_read", model.bytes_read},
              {"reads", model.reads},
              {"errors", model.errors},
              {"bytes_fetched", model.bytes_fetched},
              {"requests", model.requests},
              {"failed_requests", model.failed_requests},
              {"chunks_fetched", model.chunks_fetched},
              {"cache_errors", model.cache_errors},
              {"in_flight", model.in_flight},
              {"queued", {{"demand", model.queued_demand}, {"prefetch", model.queued_prefetch}}},
              {"views", views}};
  if (model.requested_revision) out["requested_revision"] = *model.requested_revision;
  return out;
}

// Label values escape backslash, double quote and newline (exposition format 0.0.4).
std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// Writes one metric family: HELP, TYPE, then its samples together, as the format requires.
class MetricsWriter {
 public:
  struct Sample {
    std::string labels;  // `model="x"` or empty
    std::string value;
  };

  void Family(const std::string& name, const std::string& type, const std::string& help,
              const std::vector<Sample>& samples) {
    if (samples.empty()) return;
    out_ += "# HELP " + name + " " + help + "\n";
    out_ += "# TYPE " + name + " " + type + "\n";
    for (const Sample& sample : samples) {
      out_ += name;
      if (!sample.labels.empty()) out_ += "{" + sample.labels + "}";
      out_ += " " + sample.value + "\n";
    }
  }
  // One sample per model, labelled with its name.
  void PerModel(const MountStatus& status, const std::string& name, const std::string& type,
                const std::string& help,
                const std::function<std::optional<uint64_t>(const ModelStatus&)>& figure) {
    std::vector<Sample> samples;
    for (const ModelStatus& model : status.models) {
      if (std::optional<uint64_t> value = figure(model)) {
        samples.push_back({ModelLabel(model), std::to_string(*value)});
      }
    }
    Family(name, type, help, samples);
  }
  // One sample per planned view of a model, labelled with the model and the view.
  void PerView(const MountStatus& status, const std::string& name, const std::string& type,
               const std::string& help,
               const std::function<std::optional<double>(const ViewStatus&)>& figure) {
    std::vector<Sample> samples;
    for (const ModelStatus& model : status.models) {
      for (const ViewStatus& view : model.views) {
        if (view.state == "not-planned" && view.bytes_read == 0) continue;
        if (std::optional<double> value = figure(view)) {
          samples.push_back({ModelLabel(model) + ",view=\"" + EscapeLabel(view.view) + "\"",
                             Number(*value)});
        }
      }
    }
    Family(name, type, help, samples);
  }
  static std::string ModelLabel(const ModelStatus& model) {
    return "model=\"" + EscapeLabel(model.Label()) + "\"";
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string RenderStatusJson(const MountStatus& status) {
  json models = json::array();
  for (const ModelStatus& model : status.models) models.push_back(ModelJson(model));
  json out = {{"version", status.version},
              {"mountpoint", status.facts.mountpoint},
              {"pid", status.facts.pid},
              {"started_at", Iso8601(status.facts.started_at_ns)},
              {"uptime", status.uptime_seconds},
              {"hf_cache", OrNull(status.hf_cache)},
              {"cache_dir", OrNull(status.cache_dir)},
              {"cache_size_limit", OrNull(status.cache_size_limit)},
              {"models", models}};
  if (!status.s3_sources.empty()) {
    json sources = json::array();
    for (const S3SourceStatus& source : status.s3_sources) {
      json listed_at = nullptr;
      if (source.listed_at_ns) listed_at = Iso8601(*source.listed_at_ns);
      sources.push_back({{"uri", source.uri},
                         {"models", source.models},
                         {"listed_at", listed_at},
                         {"refreshing", source.refreshing},
                         {"error", OrNull(source.error)}});
    }
    out["s3_sources"] = sources;
  }
  if (status.fetch_workers) {
    out["fetcher"] = {{"workers", *status.fetch_workers},
                      {"queued",
                       {{"demand", status.queued_demand_tasks.value_or(0)},
                        {"prefetch", status.queued_prefetch_tasks.value_or(0)}}},
                      {"memory",
                       {{"limit", status.memory_limit.value_or(0)},
                        {"used", status.memory_used.value_or(0)},
                        {"kept", status.memory_kept.value_or(0)}}}};
  }
  return out.dump(2) + "\n";
}

std::string RenderMetrics(const MountStatus& status) {
  using Sample = MetricsWriter::Sample;
  MetricsWriter w;
  w.Family("aprfs_info", "gauge", "Version of the aprfs daemon serving this mount.",
           {{"version=\"" + EscapeLabel(status.version) + "\"", "1"}});
  w.Family("aprfs_start_time_seconds", "gauge",
           "When the daemon started, in seconds since the epoch.",
           {{"", Number(static_cast<double>(status.facts.started_at_ns) / 1e9)}});
  w.Family("aprfs_uptime_seconds", "gauge", "Seconds since the daemon started.",
           {{"", Number(status.uptime_seconds)}});
  if (status.cache_size_limit) {
    w.Family("aprfs_cache_size_limit_bytes", "gauge", "Size limit of the shared chunk cache.",
             {{"", std::to_string(*status.cache_size_limit)}});
  }
  if (status.fetch_workers) {
    w.Family("aprfs_fetch_workers", "gauge", "Download workers (one HTTP connection each).",
             {{"", std::to_string(*status.fetch_workers)}});
    w.Family("aprfs_fetch_queued_tasks", "gauge",
             "Download tasks waiting for a worker, by priority.",
             {{"priority=\"demand\"", std::to_string(status.queued_demand_tasks.value_or(0))},
              {"priority=\"prefetch\"", std::to_string(status.queued_prefetch_tasks.value_or(0))}});
    w.Family("aprfs_chunk_memory_limit_bytes", "gauge",
             "Memory for chunks being downloaded and just downloaded.",
             {{"", std::to_string(status.memory_limit.value_or(0))}});
    w.Family("aprfs_chunk_memory_bytes", "gauge",
             "Memory of downloaded chunks: in use (downloading, storing, kept), kept for readers.",
             {{"state=\"used\"", std::to_string(status.memory_used.value_or(0))},
              {"state=\"kept\"", std::to_string(status.memory_kept.value_or(0))}});
  }
  if (!status.s3_sources.empty()) {
    std::vector<Sample> listed, failing;
    for (const S3SourceStatus& source : status.s3_sources) {
      const std::string label = "source=\"" + EscapeLabel(source.uri) + "\"";
      if (source.listed_at_ns) {
        listed.push_back({label, Number(static_cast<double>(*source.listed_at_ns) / 1e9)});
      }
      failing.push_back({label, source.error ? "1" : "0"});
    }
    w.Family("aprfs_s3_listed_time_seconds", "gauge",
             "When an S3 source was last listed, in seconds since the epoch.", listed);
    w.Family("aprfs_s3_listing_failed", "gauge",
             "1 when the last listing of an S3 source failed (status.json says why).", failing);
  }
  std::vector<Sample> info;
  for (const ModelStatus& model : status.models) {
    info.push_back({MetricsWriter::ModelLabel(model) + ",key=\"" + EscapeLabel(model.key) +
                        "\",kind=\"" + model.kind + "\",source=\"" + EscapeLabel(model.source) +
                        "\",revision=\"" + EscapeLabel(model.revision.value_or("")) + "\"",
                    "1"});
  }
  w.Family("aprfs_model_info", "gauge",
           "One series per model the catalog knows, with its identity.", info);
  w.PerModel(status, "aprfs_model_ready", "gauge", "1 when the model's plan is built and served.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.state == "ready"); });
  w.PerModel(status, "aprfs_model_size_bytes", "gauge", "Size of the model's .apr file.",
             [](const ModelStatus& m) { return m.size; });
  w.PerModel(status, "aprfs_model_shards", "gauge", "Shards the model is read from.",
             [](const ModelStatus& m) -> std::optional<uint64_t> {
               if (m.state != "ready") return std::nullopt;
               return m.shards.size();
             });
  w.PerModel(status, "aprfs_model_cached_bytes", "gauge",
             "Shard bytes available without the network (local files, chunks in the cache).",
             [](const ModelStatus& m) -> std::optional<uint64_t> {
               if (m.state != "ready") return std::nullopt;
               return m.cached_bytes;
             });
  w.PerModel(status, "aprfs_read_bytes_total", "counter", "Bytes served to readers of the .apr.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.bytes_read); });
  w.PerModel(status, "aprfs_reads_total", "counter",
             "Read requests of the .apr answered with bytes.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.reads); });
  w.PerModel(status, "aprfs_read_errors_total", "counter",
             "Read requests of the .apr answered with EIO.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.errors); });
  w.PerModel(status, "aprfs_fetched_bytes_total", "counter", "Shard bytes downloaded and stored.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.bytes_fetched); });
  w.PerModel(status, "aprfs_fetched_chunks_total", "counter", "Chunks downloaded and stored.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.chunks_fetched); });
  w.PerModel(status, "aprfs_http_requests_total", "counter", "HTTP range requests for chunks.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.requests); });
  w.PerModel(status, "aprfs_http_failed_requests_total", "counter",
             "HTTP range requests for chunks that failed.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.failed_requests); });
  w.PerModel(status, "aprfs_cache_errors_total", "counter",
             "Chunks the cache disk had no room for, and shards not published to the HF cache.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.cache_errors); });
  w.PerModel(status, "aprfs_fetches_in_flight", "gauge", "Chunks being downloaded now.",
             [](const ModelStatus& m) { return std::optional<uint64_t>(m.in_flight); });
  std::vector<Sample> queued;
  for (const ModelStatus& model : status.models) {
    std::string label = MetricsWriter::ModelLabel(model);
    queued.push_back({label + ",priority=\"demand\"", std::to_string(model.queued_demand)});
    queued.push_back({label + ",priority=\"prefetch\"", std::to_string(model.queued_prefetch)});
  }
  w.Family("aprfs_fetches_queued", "gauge", "Chunks waiting for a download worker, by why.",
           queued);
  w.PerView(status, "aprfs_view_read_bytes_total", "counter", "Bytes served to readers of each file of a model.",
            [](const ViewStatus& v) { return std::optional<double>(v.bytes_read); });
  w.PerView(status, "aprfs_view_computed_bytes_total", "counter", "Bytes encoded for computed views.",
            [](const ViewStatus& v) { return std::optional<double>(v.bytes_computed); });
  w.PerView(status, "aprfs_view_encoded_source_bytes_total", "counter",
            "Source bytes consumed by the encoders of computed views.",
            [](const ViewStatus& v) { return std::optional<double>(v.source_bytes_encoded); });
  w.PerView(status, "aprfs_view_encode_seconds_total", "counter",
            "Thread time spent reading and encoding computed bytes.",
            [](const ViewStatus& v) { return std::optional<double>(static_cast<double>(v.encode_ns) / 1e9); });
  w.PerView(status, "aprfs_view_cache_hits_total", "counter",
            "Computed chunks served from the computed-chunk cache.",
            [](const ViewStatus& v) { return std::optional<double>(v.cache_hits); });
  w.PerView(status, "aprfs_view_cache_misses_total", "counter",
            "Computed chunks computed because the cache did not have them.",
            [](const ViewStatus& v) { return std::optional<double>(v.cache_misses); });
  w.PerView(status, "aprfs_view_cache_pending_bytes", "gauge",
            "Computed bytes waiting to be stored in the cache.",
            [](const ViewStatus& v) { return std::optional<double>(v.cache_pending_bytes); });
  w.PerView(status, "aprfs_view_cached_bytes", "gauge", "Computed bytes held in the cache.",
            [](const ViewStatus& v) {
              return v.cached_bytes ? std::optional<double>(*v.cached_bytes) : std::nullopt;
            });
  return w.Take();
}

std::vector<std::pair<std::string, std::string>> ModelXattrs(const ModelStatus& model,
                                                            ViewKind view) {
  std::vector<std::pair<std::string, std::string>> attrs;
  const ViewStatus* file = nullptr;
  for (const ViewStatus& candidate : model.views) {
    if (candidate.view == ViewName(view)) file = &candidate;
  }
  attrs.emplace_back("user.aprfs.key", model.key);
  attrs.emplace_back("user.aprfs.source", model.source);
  if (model.revision) attrs.emplace_back("user.aprfs.revision", *model.revision);
  if (model.size) attrs.emplace_back("user.aprfs.size", std::to_string(*model.size));
  attrs.emplace_back("user.aprfs.shards", std::to_string(model.shards.size()));
  attrs.emplace_back("user.aprfs.cached_bytes", std::to_string(model.cached_bytes));
  attrs.emplace_back("user.aprfs.bytes_fetched", std::to_string(model.bytes_fetched));
  attrs.emplace_back("user.aprfs.view", std::string(ViewName(view)));
  if (!file) {
    attrs.emplace_back("user.aprfs.bytes_read", std::to_string(model.bytes_read));
    return attrs;
  }
  // The figures of this file (the .apr's are the model's).
  if (file->size) {
    for (auto& [key, value] : attrs) {
      if (key == "user.aprfs.size") value = std::to_string(*file->size);
    }
  }
  attrs.emplace_back("user.aprfs.bytes_read", std::to_string(file->bytes_read));
  attrs.emplace_back("user.aprfs.bytes_computed", std::to_string(file->bytes_computed));
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f", file->EncodeBytesPerSecond() / 1e6);
  attrs.emplace_back("user.aprfs.encode_mb_per_s", rate);
  attrs.emplace_back("user.aprfs.cache_hits", std::to_string(file->cache_hits));
  attrs.emplace_back("user.aprfs.cache_misses", std::to_string(file->cache_misses));
  if (file->cached_bytes) {
    attrs.emplace_back("user.aprfs.computed_cached_bytes", std::to_string(*file->cached_bytes));
  }
  return attrs;
}

}  // namespace aprfs
