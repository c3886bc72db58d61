#include "fs/virtual_file.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include <spdlog/spdlog.h>

#include "format/codec/kernels.h"
#include "format/codec/reference.h"
#include "fs/views/chunk_buffers.h"
#include "fs/views/encode_pool.h"
#include "fs/views/source_values.h"

namespace aprfs {
namespace {

// Source elements one piece of computed work takes: big enough to amortize a read and a task,
// small enough that a 1 MiB read is cut into pieces for every core.
constexpr uint64_t kPieceElements = 256 * 1024;
// Verbatim bytes read by one piece.
constexpr uint64_t kVerbatimPiece = 4 << 20;

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// One task of a read: verbatim source bytes, or units of a computed extent.
struct VirtualFile::Piece {
  const DataExtent* extent = nullptr;
  uint64_t first_unit = 0;  // computed extents: units [first_unit, end_unit)
  uint64_t end_unit = 0;
  uint64_t begin = 0;       // the bytes wanted, relative to the extent
  uint64_t end = 0;
  char* dst = nullptr;      // where `begin` goes
  float q8_scale = 0;
};

VirtualFile::VirtualFile(std::string name, FilePlan plan,
                         std::vector<std::shared_ptr<ByteSource>> sources,
                         std::shared_ptr<ReadCounters> counters, ComputeSettings compute)
    : name_(std::move(name)),
      plan_(std::move(plan)),
      sources_(std::move(sources)),
      counters_(counters ? std::move(counters) : std::make_shared<ReadCounters>()),
      compute_(std::move(compute)),
      crc_(plan_.footer_offset),
      computes_(AnyComputed(plan_, 0, plan_.total_size)) {}

int VirtualFile::Prepare() {
  std::call_once(prepared_, [this] {
    if (compute_.prepare) prepare_error_ = compute_.prepare();
  });
  return prepare_error_;
}

int VirtualFile::RunPiece(const Piece& piece) {
  const DataExtent& extent = *piece.extent;
  if (extent.codec == kVerbatim) {
    return sources_[extent.source]->ReadKeepingCache(extent.source_offset + piece.begin,
                                                     piece.end - piece.begin, piece.dst);
  }
  const uint64_t started = NowNs();
  const TensorCodec& codec = plan_.codecs[extent.codec];
  CodecScratch& scratch = ThreadCodecScratch();
  const ElementRange range = UnitsSource(codec, piece.first_unit, piece.end_unit);
  if (int err = ReadSourceValues(sources_, extent.source, extent.source_offset, codec, range, scratch)) {
    return err;
  }
  const uint64_t out_begin = UnitOffset(codec, piece.first_unit);
  const uint64_t out_end = UnitOffset(codec, piece.end_unit);
  const bool whole = piece.begin == out_begin && piece.end == out_end;
  if (!whole) scratch.out.resize(out_end - out_begin);
  uint8_t* out = whole ? reinterpret_cast<uint8_t*>(piece.dst) : scratch.out.data();
  EncodeUnits(codec, codec::BestKernels(), piece.first_unit, piece.end_unit, scratch.values.data(),
              piece.q8_scale, scratch.staging, out);
  if (!whole) std::memcpy(piece.dst, out + (piece.begin - out_begin), piece.end - piece.begin);
  counters_->bytes_computed += out_end - out_begin;
  counters_->source_bytes_encoded += range.count * SourceElementBytes(codec.from);
  counters_->encode_ns += NowNs() - started;
  return 0;
}

int VirtualFile::Q8Scale(uint32_t codec_index, const DataExtent& extent, float* scale) {
  {
    std::unique_lock lock(q8_mu_);
    while (true) {
      auto known = q8_scales_.find(codec_index);
      if (known != q8_scales_.end()) {
        *scale = known->second;
        return 0;
      }
      if (q8_computing_.insert(codec_index).second) break;
      q8_changed_.wait(lock);
    }
  }
  // One pass over the tensor, in pieces on every core: max |x| folds in any order (NaN aside).
  const TensorCodec& codec = plan_.codecs[codec_index];
  const uint64_t elements = codec.elements();
  const size_t pieces = static_cast<size_t>((elements + kPieceElements - 1) / kPieceElements);
  std::vector<float> maxima(pieces, 0.0f);
  std::atomic<int> error{0};
  EncodePool::Shared().ParallelFor(pieces, [&](size_t i) {
    const uint64_t first = i * kPieceElements;
    const ElementRange range{first, std::min(kPieceElements, elements - first)};
    CodecScratch& scratch = ThreadCodecScratch();
    if (int err = ReadSourceValues(sources_, extent.source, extent.source_offset, codec, range, scratch)) {
      int none = 0;
      error.compare_exchange_strong(none, err);
      return;
    }
    maxima[i] = codec::BestKernels().max_abs(scratch.values.data(), range.count, 0.0f);
  });
  float max_abs = 0.0f;
  for (float m : maxima) max_abs = std::fmax(max_abs, m);
  std::lock_guard lock(q8_mu_);
  q8_computing_.erase(codec_index);
  q8_changed_.notify_all();
  if (error) return error;
  *scale = q8_scales_[codec_index] = codec::AprQ8Scale(max_abs);
  return 0;
}

int VirtualFile::ReadBody(uint64_t offset, size_t length, char* dst, SourcePages pages) {
  const uint64_t end = offset + length;
  // From the prefix.
  if (offset < plan_.prefix.size()) {
    size_t take = std::min<uint64_t>(length, plan_.prefix.size() - offset);
    std::memcpy(dst, plan_.prefix.data() + offset, take);
    offset += take;
    dst += take;
  }
  // The extents and padding, cut into pieces that run on every core.
  std::vector<Piece> pieces;
  auto it = std::upper_bound(plan_.extents.begin(), plan_.extents.end(), offset,
                             [](uint64_t value, const DataExtent& e) { return value < e.offset; });
  if (it != plan_.extents.begin() && std::prev(it)->offset + std::prev(it)->length > offset) --it;
  while (offset < end) {
    uint64_t next = it == plan_.extents.end() ? end : std::min(end, it->offset);
    if (offset < next) {  // padding before the next extent
      std::memset(dst, 0, next - offset);
      dst += next - offset;
      offset = next;
      continue;
    }
    const DataExtent& extent = *it;
    const uint64_t begin = offset - extent.offset;
    const uint64_t stop = std::min(end, extent.offset + extent.length) - extent.offset;
    if (extent.codec == kVerbatim) {
      for (uint64_t at = begin; at < stop; at += kVerbatimPiece) {
        pieces.push_back({&extent, 0, 0, at, std::min(stop, at + kVerbatimPiece), dst + (at - begin), 0});
      }
    } else {
      const TensorCodec& codec = plan_.codecs[extent.codec];
      float q8_scale = 0;
      if (codec.to == Encoding::kAprQ8) {
        if (int err = Q8Scale(extent.codec, extent, &q8_scale)) return err;
      }
      const uint64_t header = HeaderBytes(codec);
      if (begin < header) {
        uint8_t bytes[4];
        EncodeHeader(codec, q8_scale, bytes);
        std::memcpy(dst, bytes + begin, std::min(header, stop) - begin);
      }
      const UnitSpan units = UnitsCovering(codec, begin, stop);
      const uint64_t per_piece = std::max<uint64_t>(1, kPieceElements / UnitElements(codec.to));
      for (uint64_t first = units.first; first < units.end; first += per_piece) {
        const uint64_t last = std::min(units.end, first + per_piece);
        const uint64_t from = std::max(begin, UnitOffset(codec, first));
        const uint64_t to = std::min(stop, UnitOffset(codec, last));
        pieces.push_back({&extent, first, last, from, to, dst + (from - begin), q8_scale});
      }
    }
    dst += stop - begin;
    offset = extent.offset + stop;
    ++it;
  }
  std::atomic<int> error{0};
  EncodePool::Shared().ParallelFor(pieces.size(), [&](size_t i) {
    if (int err = RunPiece(pieces[i])) {
      int none = 0;
      error.compare_exchange_strong(none, err);
    }
  });
  if (error) {
    spdlog::error("{}: read of {} bytes at {} failed: {}", name_, length, end - length,
                  std::strerror(error));
    return error;
  }
  if (pages == SourcePages::kKeep) return 0;
  // The pieces left their sources' pages cached (neighbouring pieces share folios, and the
  // kernel read ahead of each): they are let go once the whole range is done, in source ranges
  // merged across pieces, so no piece's readahead lands after its neighbour's drop.
  uint32_t source = 0;
  uint64_t from = 0, to = 0;
  for (const Piece& piece : pieces) {
    const DataExtent& extent = *piece.extent;
    uint64_t begin = extent.source_offset + piece.begin, stop = extent.source_offset + piece.end;
    if (extent.codec != kVerbatim) {
      const TensorCodec& codec = plan_.codecs[extent.codec];
      const ElementRange range = UnitsSource(codec, piece.first_unit, piece.end_unit);
      const uint64_t element_bytes = SourceElementBytes(codec.from);
      begin = extent.source_offset + range.first * element_bytes;
      stop = begin + range.count * element_bytes;
    }
    if (to > from && (extent.source != source || begin > to || begin < from)) {
      sources_[source]->DropCached(from, to - from);
      from = to = 0;
    }
    if (to == from) {
      source = extent.source;
      from = begin;
    }
    to = std::max(to, stop);
  }
  if (to > from) sources_[source]->DropCached(from, to - from);
  return 0;
}

int VirtualFile::ReadChunk(uint64_t chunk, uint64_t offset, size_t length, char* dst,
                           SourcePages pages) {
  ChunkStore& store = *compute_.store;
  const uint64_t begin = store.ChunkBegin(chunk);
  ChunkFlights& flights = *flights_;
  while (true) {
    if (store.Read(offset, length, dst) == 0) {
      counters_->cache_hits++;
      return 0;
    }
    // Computed once in this process (the kernel's readahead asks for neighbouring ranges of a
    // chunk at once), and served from memory until it is stored.
    std::unique_lock lock(flights.mu);
    auto unstored = flights.unstored.find(chunk);
    if (unstored != flights.unstored.end()) {
      std::memcpy(dst, unstored->second->data() + (offset - begin), length);
      counters_->cache_hits++;
      return 0;
    }
    if (flights.computing.insert(chunk).second) break;
    flights.done.wait(lock, [&] { return flights.computing.count(chunk) == 0; });
  }
  counters_->cache_misses++;
  std::shared_ptr<std::string> bytes = ChunkBuffer(store.ChunkLength(chunk));
  const int err = ReadBody(begin, bytes->size(), bytes->data(), pages);
  const bool store_it = err == 0 && compute_.writer != nullptr;
  {
    std::lock_guard lock(flights.mu);
    flights.computing.erase(chunk);
    if (store_it) {
      flights.unstored[chunk] = bytes;
      counters_->cache_pending_bytes += bytes->size();
    }
    flights.done.notify_all();
  }
  if (err) return err;
  std::memcpy(dst, bytes->data() + (offset - begin), length);
  if (store_it) {
    std::shared_ptr<ChunkFlights> shared = flights_;
    std::shared_ptr<ReadCounters> counters = counters_;
    compute_.writer->Enqueue({compute_.store, chunk, bytes, [shared, counters, chunk](bool stored) {
                                const uint64_t length = [&] {
                                  std::lock_guard lock(shared->mu);
                                  auto it = shared->unstored.find(chunk);
                                  uint64_t size = it == shared->unstored.end() ? 0 : it->second->size();
                                  shared->unstored.erase(chunk);
                                  return size;
                                }();
                                counters->cache_pending_bytes -= length;
                                if (stored) counters->cache_stored_bytes += length;
                              }});
  }
  return 0;
}

int VirtualFile::ReadStored(uint64_t offset, size_t length, char* dst, SourcePages pages) {
  ChunkStore* store = compute_.store.get();
  if (store == nullptr || !AnyComputed(plan_, offset, offset + length)) {
    return ReadBody(offset, length, dst, pages);
  }
  const uint64_t end = offset + length;
  while (offset < end) {
    const uint64_t chunk = store->ChunkOf(offset);
    const uint64_t chunk_begin = store->ChunkBegin(chunk);
    const uint64_t chunk_end = chunk_begin + store->ChunkLength(chunk);
    const size_t take = std::min(end, chunk_end) - offset;
    // Chunks of verbatim bytes only are read from their sources, never stored.
    int err = AnyComputed(plan_, chunk_begin, chunk_end)
                  ? ReadChunk(chunk, offset, take, dst, pages)
                  : ReadBody(offset, take, dst, pages);
    if (err) return err;
    offset += take;
    dst += take;
  }
  return 0;
}

ssize_t VirtualFile::Read(uint64_t offset, size_t length, char* dst, const ReadOptions& options) {
  const SourcePages pages = options.source_pages;
  if (offset >= plan_.total_size) return 0;
  if (int err = Prepare()) return -err;
  length = std::min<uint64_t>(length, plan_.total_size - offset);
  size_t body = offset < plan_.footer_offset
                    ? std::min<uint64_t>(length, plan_.footer_offset - offset)
                    : 0;
  if (body > 0) {
    if (int err = ReadStored(offset, body, dst, pages)) return -err;
    if (plan_.has_footer()) crc_.Observe(offset, std::string_view(dst, body));
  }
  if (body < length) {  // the request reaches into the footer
    uint32_t crc = 0;
    auto read = [this, pages](uint64_t at, size_t n, char* out) {
      return ReadStored(at, n, out, pages);
    };
    if (int err = crc_.Compute(read, options.cancelled, &crc)) return -err;
    char footer[4];
    for (int i = 0; i < 4; ++i) footer[i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
    uint64_t footer_pos = offset + body - plan_.footer_offset;
    std::memcpy(dst + body, footer + footer_pos, length - body);
  }
  return static_cast<ssize_t>(length);
}

}  // namespace aprfs
