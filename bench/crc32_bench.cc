// CRC32 throughput: zlib's crc32 against format/crc32 (ISA-L), over 64 MiB of random bytes x 16.
// Usage: build/bench/crc32_bench
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "format/apr/crc32.h"

namespace {

template <typename Crc>
void Measure(const char* name, const std::string& data, Crc crc_of) {
  constexpr int kRounds = 16;
  auto start = std::chrono::steady_clock::now();
  uint32_t crc = 0;
  for (int i = 0; i < kRounds; ++i) crc = crc_of(crc);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-8s %6.2f GB/s (crc %08x)\n", name, kRounds * data.size() / seconds / 1e9, crc);
}

}  // namespace

int main() {
  std::string data(64 << 20, '\0');
  std::mt19937_64 random(1);
  for (char& c : data) c = static_cast<char>(random());
  Measure("zlib", data, [&](uint32_t crc) {
    return static_cast<uint32_t>(
        crc32(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  });
  Measure("aprfs", data, [&](uint32_t crc) { return aprfs::Crc32(data, crc); });
  return 0;
}
