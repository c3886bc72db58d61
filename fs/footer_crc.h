#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace aprfs {

// Reads [offset, offset+length) of the file being checksummed into dst; returns 0 or an errno.
using RangeReader = std::function<int(uint64_t offset, size_t length, char* dst)>;
// Polled during long work; true means give up (the FUSE request was interrupted).
using CancelCheck = std::function<bool()>;

// The APR footer is the CRC32 of every byte before it. Computing it on demand would mean a full
// pass over the model, so it is built up from the reads that happen anyway: the file is cut into
// fixed blocks and each block keeps the CRC of its longest prefix read so far, plus the CRCs of
// pieces read out of order (the kernel's readahead hands neighbouring requests to different
// threads), folded into the prefix once it reaches them (CRCs combine without the bytes). A
// sequential `cp` therefore reaches the footer with the CRC known; a footer read before that
// only reads the parts no one has read yet, and the result is kept.
class FooterCrc {
 public:
  explicit FooterCrc(uint64_t covered_length);

  // Bytes just served at `offset` (the part beyond covered_length is ignored).
  void Observe(uint64_t offset, std::string_view bytes);
  // The CRC of [0, covered_length): known, or completed by reading what is missing.
  // Returns 0 or an errno (EINTR when cancelled; progress made so far is kept).
  int Compute(const RangeReader& read, const CancelCheck& cancelled, uint32_t* crc);
  std::optional<uint32_t> Known() const;
  // Bytes whose CRC is already known (for status and tests).
  uint64_t ObservedBytes() const;

  static constexpr uint64_t kBlockSize = 4 << 20;

 private:
  struct Piece {
    uint32_t start = 0;  // in the block
    uint32_t length = 0;
    uint32_t crc = 0;
  };
  struct Block {
    uint32_t covered = 0;  // bytes from the block start whose CRC is in `crc`
    uint32_t crc = 0;
    std::vector<Piece> ahead;  // beyond the prefix, sorted, disjoint, at most kMaxAhead
  };
  static constexpr size_t kMaxAhead = 16;
  // Blocks are allocated a page at a time, when first touched: a file of 1.4 TB has 326k
  // blocks (10 MB), and most mounts read a few of them.
  static constexpr size_t kPageBlocks = 4096;
  uint64_t BlockLength(size_t index) const;
  // The block, its page allocated if need be. Requires mu_.
  Block& BlockAt(size_t index);
  // The block, or null when its page was never touched (nothing known). Requires mu_.
  const Block* FindBlock(size_t index) const;
  // Adds what `bytes` (at `start_in_block` of block `index`) tell that the block did not know.
  void Extend(size_t index, uint64_t start_in_block, std::string_view bytes);
  // Records a piece beyond the prefix (dropped if it overlaps one, or too many). Requires mu_.
  static void Remember(Block& block, Piece piece);
  // Folds the pieces that now continue the prefix into it. Requires mu_.
  static void Absorb(Block& block);
  // Where the first unknown byte after the prefix ends (the next piece, or the block's end).
  uint64_t GapEnd(size_t index) const;
  // Combines the blocks into the result once all are complete. Requires mu_.
  void FinishIfComplete();

  const uint64_t length_;
  const size_t block_count_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Block[]>> pages_;
  size_t complete_blocks_ = 0;
  std::optional<uint32_t> result_;
  std::mutex compute_mu_;  // one full computation at a time
};

}  // namespace aprfs
