#include "fs/views/encode_pool.h"

#include <atomic>

namespace aprfs {

struct EncodePool::Job {
  const std::function<void(size_t)>* task;
  size_t count;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex mu;
  std::condition_variable finished;
};

EncodePool::EncodePool(unsigned threads) {
  if (threads == 0) {
    unsigned cores = std::thread::hardware_concurrency();
    threads = cores > 1 ? cores - 1 : 1;
  }
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

EncodePool::~EncodePool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

EncodePool& EncodePool::Shared() {
  static EncodePool pool;
  return pool;
}

void EncodePool::RunTasks(Job& job) {
  for (size_t i = job.next.fetch_add(1); i < job.count; i = job.next.fetch_add(1)) {
    (*job.task)(i);
    if (job.done.fetch_add(1) + 1 == job.count) {
      std::lock_guard lock(job.mu);
      job.finished.notify_all();
    }
  }
}

void EncodePool::ParallelFor(size_t count, const std::function<void(size_t)>& task) {
  if (count == 0) return;
  if (count == 1) {
    task(0);
    return;
  }
  auto job = std::make_shared<Job>();
  job->task = &task;
  job->count = count;
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(job);
  }
  wake_.notify_all();
  RunTasks(*job);
  std::unique_lock lock(job->mu);
  job->finished.wait(lock, [&] { return job->done.load() == job->count; });
}

void EncodePool::Work() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    std::shared_ptr<Job> job = jobs_.front();
    if (job->next.load() >= job->count) {  // every task started: nothing left to take
      jobs_.pop_front();
      continue;
    }
    lock.unlock();
    RunTasks(*job);
    lock.lock();
  }
}

}  // namespace aprfs
