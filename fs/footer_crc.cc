#include "fs/footer_crc.h"

#include <algorithm>
#include <cerrno>
#include <memory>

#include "format/apr/crc32.h"

namespace aprfs {

FooterCrc::FooterCrc(uint64_t covered_length)
    : length_(covered_length),
      block_count_((covered_length + kBlockSize - 1) / kBlockSize),
      pages_((block_count_ + kPageBlocks - 1) / kPageBlocks) {
  if (length_ == 0) result_ = 0;
}

FooterCrc::Block& FooterCrc::BlockAt(size_t index) {
  std::unique_ptr<Block[]>& page = pages_[index / kPageBlocks];
  if (!page) page = std::make_unique<Block[]>(kPageBlocks);
  return page[index % kPageBlocks];
}

const FooterCrc::Block* FooterCrc::FindBlock(size_t index) const {
  const std::unique_ptr<Block[]>& page = pages_[index / kPageBlocks];
  return page ? &page[index % kPageBlocks] : nullptr;
}

uint64_t FooterCrc::BlockLength(size_t index) const {
  return std::min<uint64_t>(kBlockSize, length_ - index * kBlockSize);
}

void FooterCrc::Extend(size_t index, uint64_t start_in_block, std::string_view bytes) {
  uint64_t start = start_in_block;
  while (!bytes.empty()) {
    const uint32_t crc = Crc32(bytes);  // outside the lock: this is the costly part
    std::lock_guard lock(mu_);
    if (result_) return;  // finished meanwhile: the blocks are gone
    Block& block = BlockAt(index);
    if (start < block.covered) {  // the prefix grew over part of it: the rest, again
      if (start + bytes.size() <= block.covered) return;
      bytes.remove_prefix(block.covered - start);
      start = block.covered;
      continue;
    }
    const Piece piece{static_cast<uint32_t>(start), static_cast<uint32_t>(bytes.size()), crc};
    if (start == block.covered) {
      block.crc = Crc32Combine(block.crc, piece.crc, piece.length);
      block.covered += piece.length;
      Absorb(block);
    } else {
      Remember(block, piece);
    }
    if (block.covered == BlockLength(index)) {
      block.ahead.clear();
      block.ahead.shrink_to_fit();
      ++complete_blocks_;
      FinishIfComplete();
    }
    return;
  }
}

void FooterCrc::Remember(Block& block, Piece piece) {
  auto at = std::lower_bound(block.ahead.begin(), block.ahead.end(), piece.start,
                             [](const Piece& p, uint32_t start) { return p.start < start; });
  const bool overlaps_next = at != block.ahead.end() && at->start < piece.start + piece.length;
  const bool overlaps_previous =
      at != block.ahead.begin() && std::prev(at)->start + std::prev(at)->length > piece.start;
  if (overlaps_next || overlaps_previous || block.ahead.size() >= kMaxAhead) return;
  block.ahead.insert(at, piece);
}

void FooterCrc::Absorb(Block& block) {
  size_t used = 0;
  for (; used < block.ahead.size(); ++used) {
    const Piece& piece = block.ahead[used];
    if (piece.start + piece.length <= block.covered) continue;  // the prefix passed over it
    if (piece.start != block.covered) break;  // a gap, or a piece the prefix cut into
    block.crc = Crc32Combine(block.crc, piece.crc, piece.length);
    block.covered += piece.length;
  }
  block.ahead.erase(block.ahead.begin(), block.ahead.begin() + static_cast<std::ptrdiff_t>(used));
  // A piece the prefix ends inside of cannot be cut: it is forgotten (read again if needed).
  while (!block.ahead.empty() && block.ahead.front().start < block.covered) {
    block.ahead.erase(block.ahead.begin());
  }
}

uint64_t FooterCrc::GapEnd(size_t index) const {
  const Block* block = FindBlock(index);
  return block == nullptr || block->ahead.empty() ? BlockLength(index) : block->ahead.front().start;
}

void FooterCrc::FinishIfComplete() {
  if (result_ || complete_blocks_ != block_count_) return;
  uint32_t total = 0;
  for (size_t index = 0; index < block_count_; ++index) {
    total = Crc32Combine(total, FindBlock(index)->crc, BlockLength(index));  // all complete
  }
  result_ = total;
  pages_.clear();
  pages_.shrink_to_fit();
}

void FooterCrc::Observe(uint64_t offset, std::string_view bytes) {
  if (offset >= length_ || Known()) return;
  bytes = bytes.substr(0, std::min<uint64_t>(bytes.size(), length_ - offset));
  while (!bytes.empty()) {
    size_t index = offset / kBlockSize;
    uint64_t start_in_block = offset - index * kBlockSize;
    size_t take = std::min<uint64_t>(bytes.size(), BlockLength(index) - start_in_block);
    Extend(index, start_in_block, bytes.substr(0, take));
    bytes.remove_prefix(take);
    offset += take;
  }
}

std::optional<uint32_t> FooterCrc::Known() const {
  std::lock_guard lock(mu_);
  return result_;
}

uint64_t FooterCrc::ObservedBytes() const {
  std::lock_guard lock(mu_);
  if (result_) return length_;
  uint64_t total = 0;
  for (const std::unique_ptr<Block[]>& page : pages_) {
    if (!page) continue;
    for (size_t i = 0; i < kPageBlocks; ++i) {
      total += page[i].covered;
      for (const Piece& piece : page[i].ahead) total += piece.length;
    }
  }
  return total;
}

int FooterCrc::Compute(const RangeReader& read, const CancelCheck& cancelled, uint32_t* crc) {
  std::lock_guard compute_lock(compute_mu_);
  if (auto known = Known()) {
    *crc = *known;
    return 0;
  }
  constexpr size_t kChunk = 1 << 20;
  std::unique_ptr<char[]> buffer(new char[kChunk]);
  for (size_t index = 0; index < block_count_; ++index) {
    uint64_t block_length = BlockLength(index);
    for (;;) {
      uint32_t covered;
      uint64_t gap_end;
      {
        std::lock_guard lock(mu_);
        if (result_) {  // concurrent reads completed every block
          *crc = *result_;
          return 0;
        }
        const Block* block = FindBlock(index);
        covered = block ? block->covered : 0;
        gap_end = GapEnd(index);
      }
      if (covered == block_length) break;
      if (cancelled && cancelled()) return EINTR;
      size_t take = std::min<uint64_t>(kChunk, gap_end - covered);  // only what is unknown
      uint64_t offset = index * kBlockSize + covered;
      if (int err = read(offset, take, buffer.get())) return err;
      Extend(index, covered, std::string_view(buffer.get(), take));
    }
  }
  std::lock_guard lock(mu_);
  FinishIfComplete();  // every block is complete by now
  *crc = *result_;
  return 0;
}

}  // namespace aprfs
