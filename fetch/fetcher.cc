#include "fetch/fetcher.h"

namespace aprfs {

Fetcher::Fetcher(unsigned workers) {
  for (unsigned i = 0; i < std::max(1u, workers); ++i) threads_.emplace_back([this] { Run(); });
}

Fetcher::~Fetcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    stopping_flag_ = true;
  }
  cv_.notify_all();
  for (std::thread& thread : threads_) thread.join();
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
