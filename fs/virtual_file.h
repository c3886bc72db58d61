#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fetch/byte_source.h"
#include "fetch/chunk_cache.h"
#include "fetch/chunk_store.h"
#include "format/apr/apr_plan.h"
#include "fs/footer_crc.h"
#include "fs/read_counters.h"
#include "fs/views/chunk_writer.h"

namespace aprfs {

// How a file with computed extents keeps what it computed, and what must hold before it serves.
struct ComputeSettings {
  // Computed chunks on disk, shared by processes and mounts (null: every byte is recomputed
  // on demand), and the cache whose size limit they count against.
  std::shared_ptr<ChunkStore> store;
  ChunkCache* cache = nullptr;
  ComputedChunkWriter* writer = nullptr;  // stores chunks in the background (with `store`)
  // Run before the first byte is served (e.g. a scan of the values the file depends on):
  // 0, or the errno every open then fails with.
  std::function<int()> prepare;
};

// What a read does with the pages of the sources it read: let them go when the bytes served are
// cached elsewhere (the FUSE file's own page cache), or keep them, when they are the only cached
// copy of the model (a direct read, which leaves nothing in the FUSE file's cache).
enum class SourcePages { kDrop, kKeep };

struct ReadOptions {
  CancelCheck cancelled;  // asked while a footer read waits for the CRC
  SourcePages source_pages = SourcePages::kDrop;
};

// A file of a model (.apr or a computed view), served from its plan: the prefix from memory,
// each extent's bytes from its source, verbatim or through its codec (encoded on every core),
// padding as zeros, the footer from the CRC tracker. Thread-safe; no FUSE in here.
class VirtualFile {
 public:
  VirtualFile(std::string name, FilePlan plan, std::vector<std::shared_ptr<ByteSource>> sources,
              std::shared_ptr<ReadCounters> counters = nullptr, ComputeSettings compute = {});

  const std::string& name() const { return name_; }
  uint64_t size() const { return plan_.total_size; }
  const FilePlan& plan() const { return plan_; }
  const std::vector<std::shared_ptr<ByteSource>>& sources() const { return sources_; }
  FooterCrc& footer_crc() { return crc_; }
  ReadCounters& counters() { return *counters_; }
  const std::shared_ptr<ChunkStore>& store() const { return compute_.store; }
  // Whether any byte is computed (encoded) rather than copied from a source: such bytes cost
  // the CPU of every core, so they are computed only when asked for, never read ahead.
  bool computes() const { return computes_; }

  // What must hold before serving (see ComputeSettings::prepare): 0 or an errno. Cheap after
  // the first call.
  int Prepare();

  // Reads up to `length` bytes at `offset` (fewer only at end of file) into dst. Returns the
  // byte count or -errno; never a short read in the middle, never wrong bytes.
  ssize_t Read(uint64_t offset, size_t length, char* dst, const ReadOptions& options = {});

 private:
  struct Piece;
  // [offset, offset+length) entirely before the footer, through the computed-chunk store when
  // it touches computed bytes.
  int ReadStored(uint64_t offset, size_t length, char* dst, SourcePages pages);
  // One chunk of the store: from it, or computed (once in this process) and stored.
  int ReadChunk(uint64_t chunk, uint64_t offset, size_t length, char* dst, SourcePages pages);
  // The same range, computed from the sources.
  int ReadBody(uint64_t offset, size_t length, char* dst, SourcePages pages);
  int RunPiece(const Piece& piece);
  // AprQ8's tensor-wide scale of the extent's codec (one pass over the tensor, remembered).
  int Q8Scale(uint32_t codec, const DataExtent& extent, float* scale);

  std::string name_;
  FilePlan plan_;
  std::vector<std::shared_ptr<ByteSource>> sources_;
  std::shared_ptr<ReadCounters> counters_;
  ComputeSettings compute_;
  FooterCrc crc_;
  bool computes_ = false;

  std::once_flag prepared_;
  int prepare_error_ = 0;

  std::mutex q8_mu_;
  std::condition_variable q8_changed_;
  std::map<uint32_t, float> q8_scales_;  // by codec
  std::set<uint32_t> q8_computing_;

  // Chunks of the store being computed by this process, and computed ones not stored yet
  // (readers take them from memory). Shared with the writer's callbacks.
  struct ChunkFlights {
    std::mutex mu;
    std::condition_variable done;
    std::set<uint64_t> computing;
    std::map<uint64_t, std::shared_ptr<const std::string>> unstored;
  };
  std::shared_ptr<ChunkFlights> flights_ = std::make_shared<ChunkFlights>();
};

}  // namespace aprfs
