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
// runs download tasks: tasks a reader waits for run before prefetch tasks. Work that must not
// hold a worker (and so its connection) while it runs goes to a lane: a thread of its own per
// kind, first in first out.
class Fetcher {
 public:
  enum class Priority { Demand, Prefetch, Background };
  // Commit: making downloaded chunks durable (fdatasync) and present, so the connection goes on
  // with the next request meanwhile. Verify: hashing complete files, at a lower CPU priority
  // than downloads and readers.
  enum class Lane { Commit, Verify };

  explicit Fetcher(unsigned workers);
  // Stops after the running tasks; queued ones are dropped, except commits (quick, and they
  // keep what was downloaded).
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  void Submit(Priority priority, std::function<void()> task);
  void Submit(Lane lane, std::function<void()> task);
  unsigned workers() const { return static_cast<unsigned>(threads_.size()); }
  // Tasks waiting, per priority or lane (for status and tests).
  size_t Queued(Priority priority) const;
  size_t Queued(Lane lane) const;
  // True once the destructor has begun: running tasks should give up (unmount must not wait
  // for retries and backoffs).
  bool Stopping() const { return stopping_flag_.load(std::memory_order_relaxed); }
  // Sleeps for `duration` unless the pool stops first; false when it did.
  bool Pause(std::chrono::milliseconds duration);

 private:
  void Run();
  void RunLane(Lane lane);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queues_[3];
  bool stopping_ = false;
  std::atomic<bool> stopping_flag_{false};
  std::vector<std::thread> threads_;
  std::condition_variable lanes_cv_;
  std::deque<std::function<void()>> lanes_[2];
  bool lanes_stopping_ = false;  // after the workers: the commit lane then drains its queue
  std::thread lane_threads_[2];
};

}  // namespace aprfs
