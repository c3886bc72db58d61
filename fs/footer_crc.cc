#include "fs/footer_crc.h"

#include <algorithm>
#include <cerrno>
#include <memory>

#include "format/apr/crc32.h"

namespace aprfs {

FooterCrc::FooterCrc(uint64_t covered_length)
    : length_(covered_length),
      block_count_((covered_length + kBlockSize - 1) / kBlockSize),
      blocks_(block_count_) {
  if (length_ == 0) result_ = 0;
}

uint64_t FooterCrc::BlockLength(size_t index) const {
  return std::min<uint64_t>(kBlockSize, length_ - index * kBlockSize);
}

void FooterCrc::Extend(size_t index, uint64_t start_in_block, std::string_view bytes) {
  uint32_t covered, crc;
  {
    std::lock_guard lock(mu_);
    if (result_) return;
    covered = blocks_[index].covered;
    crc = blocks_[index].crc;
  }
  // Use the part of `bytes` that continues the block's prefix, if any.
  if (start_in_block > covered || start_in_block + bytes.size() <= covered) return;
  std::string_view fresh = bytes.substr(covered - start_in_block);
  uint32_t extended = Crc32(fresh, crc);  // outside the lock: this is the costly part
  std::lock_guard lock(mu_);
  if (result_) return;  // finished meanwhile: the blocks are gone
  Block& block = blocks_[index];
  if (block.covered != covered) return;  // somebody extended it meanwhile
  block.covered = covered + static_cast<uint32_t>(fresh.size());
  block.crc = extended;
  if (block.covered == BlockLength(index)) {
    ++complete_blocks_;
    FinishIfComplete();
  }
}

void FooterCrc::FinishIfComplete() {
  if (result_ || complete_blocks_ != block_count_) return;
  uint32_t total = 0;
  for (size_t index = 0; index < block_count_; ++index) {
    total = Crc32Combine(total, blocks_[index].crc, BlockLength(index));
  }
  result_ = total;
  blocks_.clear();
  blocks_.shrink_to_fit();
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
  for (const Block& block : blocks_) total += block.covered;
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
      {
        std::lock_guard lock(mu_);
        if (result_) {  // concurrent reads completed every block
          *crc = *result_;
          return 0;
        }
        covered = blocks_[index].covered;
      }
      if (covered == block_length) break;
      if (cancelled && cancelled()) return EINTR;
      size_t take = std::min<uint64_t>(kChunk, block_length - covered);
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
