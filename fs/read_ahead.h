#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace aprfs {

// A sequential reader of a direct I/O file has one request in flight at a time: on its own,
// the daemon would read the sources only once each request arrives, and the reply would then
// copy those bytes into the reader, one step after the other on one core. ReadAhead reads the
// windows that follow the reader on a thread of its own while the current reply is copied, so
// the two overlap and the next request finds its bytes ready.
//
// Windows are kWindow bytes, contiguous from where the reader proved sequential; a request may
// straddle two (the kernel cuts a read into requests by the reader's pages, not by offsets), so
// replies are iovecs. One per open file. Memory: at most kWindows + 3 windows (those of the
// request, those ahead, one spare) and a thread, only once the reader proved sequential; at
// most kMaxStreams open files have them at once.
class ReadAhead {
 public:
  // Reads [offset, offset+length) into dst: the count (short only at end of file) or -errno.
  using ReadFn = std::function<ssize_t(uint64_t offset, size_t length, char* dst)>;
  // Replies with the bytes of `iov` (count entries), in order.
  using DeliverIov = std::function<void(const struct iovec* iov, int count)>;

  explicit ReadAhead(ReadFn read);
  ~ReadAhead();  // waits for the read in flight, if any
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // A request for [offset, offset+length). When windows read ahead hold all of it, delivers it
  // from them and returns the count; otherwise returns nullopt and the caller reads it itself
  // (a failed read ahead included: the caller's own read reports the error). Either way, a
  // sequential reader gets the windows after this request read ahead.
  std::optional<size_t> TryServe(uint64_t offset, size_t length, const DeliverIov& deliver);

  static constexpr size_t kWindow = 1 << 20;
  // Windows read ahead of the end of the current request (one more than the reply being
  // copied measured ~10% faster; more, or 2 MiB windows, no faster).
  static constexpr size_t kWindows = 2;
  // Bytes read sequentially before windows are read ahead: a reader of a header in small
  // pieces costs nothing.
  static constexpr size_t kStartAfter = kWindow / 2;
  static constexpr int kMaxStreams = 4;

 private:
  enum class State { kQueued, kReading, kDone };
  struct Window {
    uint64_t offset = 0;
    State state = State::kQueued;
    ssize_t result = 0;  // kDone: what read_ returned
    std::unique_ptr<char[]> bytes;
    uint64_t end() const { return offset + kWindow; }
  };

  // Queues windows until they reach kWindows past `end`, from `end` if there are none.
  // Requires mu_.
  void ScheduleAhead(uint64_t end);
  void Work();

  const ReadFn read_;
  std::mutex serve_mu_;  // one request served at a time: windows are dropped only under it
  std::mutex mu_;
  std::condition_variable changed_;
  uint64_t expected_ = 0;  // where the previous request ended: the next one of a sequential reader
  uint64_t run_ = 0;       // bytes of the current sequential run
  std::deque<std::shared_ptr<Window>> windows_;  // contiguous, ascending
  std::vector<std::unique_ptr<char[]>> spare_;    // buffers of dropped windows, for reuse
  bool stopping_ = false;
  bool counted_ = false;  // holds one of the kMaxStreams
  std::thread worker_;

  static std::atomic<int> streams_;
};

}  // namespace aprfs
