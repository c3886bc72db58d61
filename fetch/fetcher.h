#pragma once

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

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queues_[3];
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace aprfs
