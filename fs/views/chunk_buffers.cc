#include "fs/views/chunk_buffers.h"

#include <mutex>
#include <vector>

namespace aprfs {
namespace {

// Idle buffers kept: enough for a reader per core and the writer's batch to cycle through.
constexpr size_t kKeptBuffers = 8;

std::mutex pool_mu;
std::vector<std::string*>& Pool() {
  static auto* pool = new std::vector<std::string*>();  // never destroyed: buffers may be freed late
  return *pool;
}

}  // namespace

std::shared_ptr<std::string> ChunkBuffer(size_t size) {
  std::string* buffer = nullptr;
  {
    std::lock_guard lock(pool_mu);
    if (!Pool().empty()) {
      buffer = Pool().back();
      Pool().pop_back();
    }
  }
  if (buffer == nullptr) buffer = new std::string();
  buffer->resize(size);  // no fill when it held as much before
  return std::shared_ptr<std::string>(buffer, [](std::string* done) {
    std::lock_guard lock(pool_mu);
    if (Pool().size() < kKeptBuffers) {
      Pool().push_back(done);
    } else {
      delete done;
    }
  });
}

}  // namespace aprfs
