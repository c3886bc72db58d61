#pragma once

// Small helpers shared by the remote test files: classifying the CDN requests of the access log,
// reading a mounted file sequentially while tolerating failures, and checking what was read.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fetch/local_model.h"
#include "format/views/model_import.h"
#include "tests/remote/remote_fixture.h"
#include "tests/support/materialize.h"

namespace aprfs_rtest {

// A CDN request for the first bytes of a shard (`bytes=0-65535`, or the whole file if smaller)
// or the continuation of a long header (`bytes=65536-...` below 8 + header length).
inline bool IsHeaderRange(const AccessLine& line, uint64_t file_size) {
  if (!line.has_range) return false;
  if (line.first == 0 && line.last == std::min(kHeaderRead, file_size) - 1) return true;
  return line.first == kHeaderRead && line.last < kChunk - 1;
}

// A CDN request for whole chunks of the chunk store (one, or several in a row: a request for a
// read-ahead window's chunks spans them).
inline bool IsChunkRange(const AccessLine& line, uint64_t file_size) {
  if (!line.has_range || line.first % kChunk != 0 || line.first >= file_size) return false;
  if (line.last < line.first || line.last >= file_size) return false;
  return (line.last + 1) % kChunk == 0 || line.last == file_size - 1;
}

// The chunks a chunk range covers.
inline std::vector<uint64_t> ChunksOf(const AccessLine& line) {
  std::vector<uint64_t> chunks;
  for (uint64_t chunk = line.first / kChunk; chunk <= line.last / kChunk; ++chunk) {
    chunks.push_back(chunk);
  }
  return chunks;
}

// CDN GETs of one blob.
inline std::vector<AccessLine> LinesFor(const std::vector<AccessLine>& log,
                                        const std::string& sha) {
  std::vector<AccessLine> out;
  for (const AccessLine& line : log) {
    if (line.sha == sha) out.push_back(line);
  }
  return out;
}

// How many successful (206) chunk downloads each chunk of a blob got.
inline std::map<uint64_t, int> ChunkDownloads(const std::vector<AccessLine>& log,
                                              const std::string& sha, uint64_t file_size) {
  std::map<uint64_t, int> out;
  for (const AccessLine& line : LinesFor(log, sha)) {
    if (line.status != 206 || !IsChunkRange(line, file_size)) continue;
    for (uint64_t chunk : ChunksOf(line)) ++out[chunk];
  }
  return out;
}

inline uint64_t ChunkCount(uint64_t file_size) { return (file_size + kChunk - 1) / kChunk; }

// CDN requests that carry data (GETs of a blob URL).
inline size_t DataRequestCount(const std::vector<AccessLine>& log) {
  size_t n = 0;
  for (const AccessLine& line : log) n += !line.sha.empty();
  return n;
}

inline std::string Describe(const std::vector<AccessLine>& lines) {
  std::string out;
  for (const AccessLine& line : lines) out += "  " + line.raw + "\n";
  return out;
}

// What a sequential read(2) of a whole file obtained: the bytes up to the first failure, the
// errno of that failure (0 when the end was reached), and how long it took. Short reads are
// followed by another read (the kernel returns what it has before reporting an error).
struct SequentialRead {
  std::string bytes;
  int error = 0;
  double seconds = 0;
  uint64_t size = 0;  // st_size
};

inline SequentialRead ReadSequentially(const std::string& path, size_t piece = 1 << 20) {
  SequentialRead result;
  auto start = Clock::now();
  Fd fd(path, O_RDONLY);
  if (!fd.ok()) {
    result.error = errno;
    return result;
  }
  struct stat st;
  fstat(fd.get(), &st);
  result.size = static_cast<uint64_t>(st.st_size);
  std::string buffer(piece, '\0');
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result.error = errno;
      break;
    }
    if (n == 0) break;
    result.bytes.append(buffer.data(), static_cast<size_t>(n));
  }
  if (result.error == 0 && result.bytes.size() != result.size) result.error = -1;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

// Problems of the first bytes of a mounted file (a read that failed part way): every tensor
// byte that was read must equal the source. `layout` comes from the mounted file's prefix.
inline std::vector<std::string> CheckAprPrefix(const std::string& prefix, const AprLayout& layout,
                                               const SourceModel& model) {
  std::vector<std::string> problems;
  for (const AprEntry& e : layout.entries) {
    if (!model.tensors.count(e.name)) continue;
    uint64_t begin = layout.data_offset + e.offset;
    if (begin >= prefix.size()) continue;
    uint64_t n = std::min<uint64_t>(e.size, prefix.size() - begin);
    std::string want = model.TensorBytes(e.name).substr(0, n);
    if (prefix.compare(begin, n, want) != 0) {
      problems.push_back("tensor " + e.name + ": the bytes read differ from the source");
    }
  }
  return problems;
}

// The .apr file a --repo mount of `model` serves (`name` "big", `source_uri` "hf://org/big"):
// the plan of the source folder, materialized the simple way (tests/support/materialize.h).
inline std::string MaterializedApr(const SourceModel& model, const std::string& name,
                                   const std::string& source_uri) {
  aprfs::LoadedModel loaded = aprfs::LoadLocalModel(model.dir, name, source_uri);
  aprfs::ImportedModel imported = aprfs::ImportShardSet(loaded.set);
  std::vector<std::string> shards;
  for (const aprfs::Shard& shard : loaded.set.shards) {
    std::string bytes, error;
    if (!ReadWholeFile(model.ShardPath(shard.file), &bytes, &error)) ADD_FAILURE() << error;
    shards.push_back(std::move(bytes));
  }
  return aprfs::testing::MaterializePlan(imported.plan, shards);
}

// status.json of a mount, read to end of file (its size can grow between stat and read).
inline json ReadStatus(const AprfsMount& mount) {
  std::string text = SlurpOrEmpty(mount.Path(".aprfs/status.json"));
  json status = json::parse(text, nullptr, false);
  if (status.is_discarded() || !status.is_object()) {
    ADD_FAILURE() << "status.json is not a JSON object:\n" << text;
    return json::object();
  }
  return status;
}

// One model of a status.json, by its first name ("big.apr").
inline json ModelEntry(const json& status, const std::string& name) {
  for (const json& model : status.value("models", json::array())) {
    if (model.value("name", json()) == name) return model;
  }
  ADD_FAILURE() << "no model " << name << " in:\n" << status.dump(2);
  return json::object();
}

// Store folder of a blob in a cache dir.
inline std::string StoreDir(const std::string& cache_dir, const std::string& sha) {
  return cache_dir + "/chunks/" + sha;
}

// Flips the bits of one byte of a file in place (same inode: a server holding it open serves
// the change). False when the file cannot be read or written.
inline bool FlipByte(const std::string& path, uint64_t at, char mask = 0x5A) {
  Fd fd(path, O_RDWR);
  char byte = 0;
  if (!fd.ok() || ::pread(fd.get(), &byte, 1, static_cast<off_t>(at)) != 1) return false;
  byte = static_cast<char>(byte ^ mask);
  return ::pwrite(fd.get(), &byte, 1, static_cast<off_t>(at)) == 1;
}

}  // namespace aprfs_rtest
