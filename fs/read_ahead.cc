#include "fs/read_ahead.h"

#include <algorithm>
#include <utility>

namespace aprfs {

std::atomic<int> ReadAhead::streams_{0};

ReadAhead::ReadAhead(ReadFn read) : read_(std::move(read)) {}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (counted_) streams_--;
}

std::optional<size_t> ReadAhead::TryServe(uint64_t offset, size_t length,
                                          const DeliverIov& deliver) {
  std::lock_guard serving(serve_mu_);
  std::unique_lock lock(mu_);
  const uint64_t end = offset + length;
  run_ = offset == expected_ ? run_ + length : length;
  expected_ = end;
  const bool sequential = run_ >= kStartAfter;
  auto drop_front = [&] {
    std::shared_ptr<Window>& window = windows_.front();
    // A window being read stays the worker's until it is done; then it is freed.
    if (window->state != State::kReading && spare_.empty()) {
      spare_.push_back(std::move(window->bytes));
    }
    windows_.pop_front();
  };
  while (!windows_.empty() && windows_.front()->end() <= offset) drop_front();
  const bool covered = length > 0 && !windows_.empty() && windows_.front()->offset <= offset &&
                       windows_.back()->end() >= end;
  if (!covered) {
    while (!windows_.empty()) drop_front();  // the reader went elsewhere
    if (sequential) ScheduleAhead(end);
    return std::nullopt;
  }
  ScheduleAhead(end);  // read on while this request is served
  std::vector<std::shared_ptr<Window>> held;
  for (const std::shared_ptr<Window>& window : windows_) {
    if (window->offset < end) held.push_back(window);
  }
  changed_.wait(lock, [&] {
    return stopping_ || std::all_of(held.begin(), held.end(), [](const auto& w) {
             return w->state == State::kDone;
           });
  });
  if (stopping_) return std::nullopt;
  std::vector<struct iovec> iov;
  size_t total = 0;
  for (const std::shared_ptr<Window>& window : held) {
    if (window->result < 0) return std::nullopt;  // the caller's own read reports the error
    const uint64_t from = std::max(offset, window->offset) - window->offset;
    const uint64_t to = std::min(end, window->end()) - window->offset;
    const uint64_t have = std::min<uint64_t>(to, static_cast<uint64_t>(window->result));
    if (have > from) {
      iov.push_back({window->bytes.get() + from, static_cast<size_t>(have - from)});
      total += have - from;
    }
    if (have < to) break;  // the end of the file
  }
  lock.unlock();
  deliver(iov.data(), static_cast<int>(iov.size()));
  lock.lock();
  // The next request starts at `end`: windows that end there are done with.
  while (!windows_.empty() && windows_.front()->end() <= end) drop_front();
  return total;
}

void ReadAhead::ScheduleAhead(uint64_t end) {
  if (stopping_) return;
  if (!worker_.joinable()) {
    if (!counted_) {
      if (streams_.fetch_add(1) >= kMaxStreams) {
        streams_--;
        return;
      }
      counted_ = true;
    }
    worker_ = std::thread([this] { Work(); });
  }
  while (windows_.empty() || windows_.back()->end() < end + kWindows * kWindow) {
    if (!windows_.empty()) {
      const Window& last = *windows_.back();
      // Nothing after the end of the file.
      if (last.state == State::kDone && last.result >= 0 &&
          last.result < static_cast<ssize_t>(kWindow)) {
        return;
      }
    }
    auto window = std::make_shared<Window>();
    window->offset = windows_.empty() ? end : windows_.back()->end();
    if (!spare_.empty()) {
      window->bytes = std::move(spare_.back());
      spare_.pop_back();
    } else {
      window->bytes.reset(new char[kWindow]);
    }
    windows_.push_back(std::move(window));
  }
  changed_.notify_all();
}

void ReadAhead::Work() {
  std::unique_lock lock(mu_);
  while (true) {
    std::shared_ptr<Window> next;
    changed_.wait(lock, [&] {
      if (stopping_) return true;
      for (const std::shared_ptr<Window>& window : windows_) {
        if (window->state == State::kQueued) {
          next = window;
          return true;
        }
      }
      return false;
    });
    if (stopping_) return;
    next->state = State::kReading;
    lock.unlock();
    const ssize_t result = read_(next->offset, kWindow, next->bytes.get());
    lock.lock();
    next->result = result;
    next->state = State::kDone;
    changed_.notify_all();
  }
}

}  // namespace aprfs
