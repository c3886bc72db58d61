#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace aprfs {

// Threads that encode computed views, one per core: a read of a computed range is cut into
// pieces that run on every core, the reading thread included. Pieces of several reads share
// the threads fairly (first come, first served).
class EncodePool {
 public:
  // `threads` 0: one per core, less the caller's.
  explicit EncodePool(unsigned threads = 0);
  ~EncodePool();
  EncodePool(const EncodePool&) = delete;
  EncodePool& operator=(const EncodePool&) = delete;

  // Runs task(0) ... task(count - 1), on the pool and on the calling thread, and returns when
  // all have run. Tasks must not throw.
  void ParallelFor(size_t count, const std::function<void(size_t)>& task);

  // The process's pool.
  static EncodePool& Shared();

 private:
  struct Job;
  void Work();
  // Runs tasks of `job` until none is left to start.
  static void RunTasks(Job& job);

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace aprfs
