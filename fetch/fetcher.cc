#include "fetch/fetcher.h"

#include <sys/resource.h>
#include <unistd.h>

namespace aprfs {

Fetcher::Fetcher(unsigned workers) {
  for (unsigned i = 0; i < std::max(1u, workers); ++i) threads_.emplace_back([this] { Run(); });
  for (Lane lane : {Lane::Commit, Lane::Verify}) {
    lane_threads_[static_cast<int>(lane)] = std::thread([this, lane] { RunLane(lane); });
  }
}

Fetcher::~Fetcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    stopping_flag_ = true;
  }
  cv_.notify_all();
  lanes_cv_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  // The workers are gone: no more commits come.
  {
    std::lock_guard lock(mu_);
    lanes_stopping_ = true;
  }
  lanes_cv_.notify_all();
  for (std::thread& thread : lane_threads_) thread.join();
}

void Fetcher::Submit(Lane lane, std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    lanes_[static_cast<int>(lane)].push_back(std::move(task));
  }
  lanes_cv_.notify_all();
}

size_t Fetcher::Queued(Lane lane) const {
  std::lock_guard lock(mu_);
  return lanes_[static_cast<int>(lane)].size();
}

void Fetcher::RunLane(Lane lane) {
  // Verification yields the CPU to downloads and readers (a thread's own nice value on Linux).
  if (lane == Lane::Verify) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  auto& queue = lanes_[static_cast<int>(lane)];
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      lanes_cv_.wait(lock, [&] {
        return !queue.empty() || lanes_stopping_ || (lane == Lane::Verify && stopping_);
      });
      // Queued commits still run when stopping (quick, and they keep what was downloaded);
      // queued verifications do not.
      if (queue.empty() || (lane == Lane::Verify && stopping_)) return;
      task = std::move(queue.front());
      queue.pop_front();
    }
    task();
  }
}

void Fetcher::Submit(Priority priority, std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queues_[static_cast<int>(priority)].push_back(std::move(task));
  }
  cv_.notify_one();
}

bool Fetcher::Pause(std::chrono::milliseconds duration) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, duration, [&] { return stopping_; });
}

size_t Fetcher::Queued(Priority priority) const {
  std::lock_guard lock(mu_);
  return queues_[static_cast<int>(priority)].size();
}

void Fetcher::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !queues_[0].empty() || !queues_[1].empty() || !queues_[2].empty();
      });
      if (stopping_) return;
      for (auto& queue : queues_) {
        if (!queue.empty()) {
          task = std::move(queue.front());
          queue.pop_front();
          break;
        }
      }
    }
    task();
  }
}

}  // namespace aprfs
