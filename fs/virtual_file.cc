#include "fs/virtual_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace aprfs {

VirtualFile::VirtualFile(std::string name, AprPlan plan,
                         std::vector<std::shared_ptr<ByteSource>> sources)
    : name_(std::move(name)),
      plan_(std::move(plan)),
      sources_(std::move(sources)),
      crc_(plan_.footer_offset) {}

int VirtualFile::ReadBody(uint64_t offset, size_t length, char* dst) {
  const uint64_t end = offset + length;
  // From the prefix.
  if (offset < plan_.prefix.size()) {
    size_t take = std::min<uint64_t>(length, plan_.prefix.size() - offset);
    std::memcpy(dst, plan_.prefix.data() + offset, take);
    offset += take;
    dst += take;
  }
  // First extent that ends after `offset`.
  auto it = std::upper_bound(plan_.extents.begin(), plan_.extents.end(), offset,
                             [](uint64_t value, const AprDataExtent& e) { return value < e.offset; });
  if (it != plan_.extents.begin() && std::prev(it)->offset + std::prev(it)->length > offset) --it;
  while (offset < end) {
    uint64_t next = it == plan_.extents.end() ? end : std::min(end, it->offset);
    if (offset < next) {  // padding before the next extent
      std::memset(dst, 0, next - offset);
      dst += next - offset;
      offset = next;
      continue;
    }
    uint64_t take = std::min(end, it->offset + it->length) - offset;
    ByteSource& source = *sources_[it->source];
    if (int err = source.Read(it->source_offset + (offset - it->offset), take, dst)) {
      spdlog::error("{}: read of {} bytes at {} from {} failed: {}", name_, take, offset,
                    source.name(), std::strerror(err));
      return err;
    }
    dst += take;
    offset += take;
    ++it;
  }
  return 0;
}

ssize_t VirtualFile::Read(uint64_t offset, size_t length, char* dst,
                          const CancelCheck& cancelled) {
  if (offset >= plan_.total_size) return 0;
  length = std::min<uint64_t>(length, plan_.total_size - offset);
  size_t body = offset < plan_.footer_offset
                    ? std::min<uint64_t>(length, plan_.footer_offset - offset)
                    : 0;
  if (body > 0) {
    if (int err = ReadBody(offset, body, dst)) return -err;
    crc_.Observe(offset, std::string_view(dst, body));
  }
  if (body < length) {  // the request reaches into the footer
    uint32_t crc = 0;
    auto read = [this](uint64_t at, size_t n, char* out) { return ReadBody(at, n, out); };
    if (int err = crc_.Compute(read, cancelled, &crc)) return -err;
    char footer[4];
    for (int i = 0; i < 4; ++i) footer[i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
    uint64_t footer_pos = offset + body - plan_.footer_offset;
    std::memcpy(dst + body, footer + footer_pos, length - body);
  }
  return static_cast<ssize_t>(length);
}

}  // namespace aprfs
