#include "tests/support/materialize.h"

#include <zlib.h>

#include <stdexcept>

namespace aprfs::testing {

uint32_t ZlibCrc32(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

std::string MaterializePlan(const FilePlan& plan, const std::vector<std::string>& sources) {
  std::string file = plan.prefix;
  if (file.size() != plan.data_offset) throw std::logic_error("prefix size != data_offset");
  for (const DataExtent& e : plan.extents) {
    if (e.offset < file.size()) throw std::logic_error("extents overlap or are unsorted");
    if (e.source_offset + e.length > sources.at(e.source).size()) {
      throw std::logic_error("extent runs past its source");
    }
    file.resize(e.offset, '\0');
    file += sources.at(e.source).substr(e.source_offset, e.length);
  }
  if (file.size() > plan.footer_offset) throw std::logic_error("data runs into the footer");
  file.resize(plan.footer_offset, '\0');
  uint32_t crc = ZlibCrc32(file);
  for (int i = 0; i < 4; ++i) file += static_cast<char>((crc >> (8 * i)) & 0xFF);
  if (file.size() != plan.total_size) throw std::logic_error("size != total_size");
  return file;
}

}  // namespace aprfs::testing
