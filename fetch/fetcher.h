#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace aprfs {

// A fixed pool of worker threads, one HTTP connection each (kept alive between requests), that
// runs download tasks: tasks a reader waits for run before prefetch tasks.
class Fetcher {
 public:
  enum class Priority { Demand, Prefetch, Background };

  explicit Fetcher(unsigned workers);
  ~Fetcher();  // stops after the running tasks; queued ones are dropped
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  void Submit(Priority priority, std::function<void()> task);
  unsigned workers() const { return static_cast<unsigned>(threads_.size()); }
  // Tasks waiting, per priority (for status and tests).
  size_t Queued(Priority priority) const;
  // True once the destructor has begun: running tasks should give up (unmount must not wait
  // for retries and backoffs).
  bool Stopping() const { return stopping_flag_.load(std::memory_order_relaxed); }
  // Sleeps for `duration` unless the pool stops first; false when it did.
  bool Pause(std::chrono::milliseconds duration);

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queues_[3];
  bool stopping_ = false;
  std::atomic<bool> stopping_flag_{false};
  std::vector<std::thread> threads_;
};

}  // namespace aprfs
