#pragma once

// Many concurrent readers of one mounted .apr, every read compared byte for byte with the
// versions of the file the test allows (the load and fault tests of issue #5).
//
// Readers are threads with their own descriptor or sharing one (pread), buffered or O_DIRECT,
// some keeping their descriptor for the whole run and some opening the file again every few
// dozen reads, plus child processes reading through a MAP_SHARED mapping (a SIGBUS there is a
// read error, not a crash). Each read has a deadline: a read that does not return in time is a
// failure, and the pool kills the daemon so that it returns. Outcomes are counted per reader in
// memory shared with the children, so a test can watch them while the readers run.
//
// An "event" (MarkEvent) splits a run in two: before it any error is a failure; after it errors
// are only counted, and the test says which ones it accepts (EIO for a changed shard, ENOTCONN
// for a killed daemon...). Wrong bytes are a failure whenever they happen.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {

// One version of a model's .apr as aprfs must serve it.
struct AprVersion {
  std::string bytes;
  // Offsets where reads most often go wrong: the ends of the header, metadata, index and data
  // regions, every tensor's start and end (shard changes among them), the footer CRC blocks.
  std::vector<uint64_t> boundaries;
  // For each shard (plan source, in shard order), the ranges of the file its bytes fill.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> shard_ranges;
};

// The .apr of the local model in `dir`, as its files are now: laid out by the importer, filled
// from the shard files by tests/support/materialize.h (not by the read path under test), then
// checked independently (own index parse, every tensor of `model`). `name` and `source_uri`
// are those of the mount (they are part of the metadata).
void BuildExpectedApr(const std::string& dir, const std::string& name,
                      const std::string& source_uri, const tw::TestModel& model, AprVersion* out);

// What happened to reads: counted per reader, before and after the event.
enum Outcome { kEio, kNotConnected, kAborted, kNoEntry, kSigbus, kOtherError, kOutcomeCount };
const char* OutcomeName(int outcome);

struct ReaderStats {
  std::atomic<uint64_t> reads{0};  // exact reads
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> wrong{0};  // reads whose bytes match no allowed version
  std::atomic<uint64_t> exact_after_event{0};
  // Exact reads through a descriptor whose bytes are no longer those of version 0.
  std::atomic<uint64_t> new_version_reads{0};
  // Reads that should have failed (MarkEventDone's ranges) and returned bytes.
  std::atomic<uint64_t> served_after_change{0};
  std::atomic<uint64_t> errors[2][kOutcomeCount] = {};  // [after event][outcome]; opens too
  std::atomic<int> other_errno{0};
  std::atomic<int64_t> in_read_since_ns{0};  // 0 when not in a read: the hang watchdog
  std::atomic<int64_t> first_error_after_event_ns{0};
  std::atomic<uint64_t> exact_since_error{0};  // exact reads since the last failed read or open
  std::atomic<bool> failed{false};
  char failure[1024] = {};  // the first unexpected outcome, when `failed`

  uint64_t Errors(bool after_event) const;
  std::string ErrorSummary(bool after_event) const;  // "EIO x3, SIGBUS x1"
};

struct ReaderOptions {
  int threads = 16;
  int mappers = 2;
  uint64_t max_read = 4 << 20;
  std::chrono::milliseconds read_deadline{20000};
  uint64_t seed = 1;
  // Readers of the reopening kind open the file again every few dozen reads and after an error.
  bool reopen_often = true;
  // After the connection is lost (ENOTCONN, ECONNABORTED; SIGBUS for mappers) every reader opens
  // the file again, retrying until it can (a remount).
  bool recover = false;
};

class ReaderPool {
 public:
  // `versions[0]` is the file as mounted; descriptors opened after MarkEvent may show any of
  // the versions, but each descriptor only one. `on_hang` is called once if a read overruns its
  // deadline (it should make blocked reads return: kill the daemon).
  ReaderPool(std::string path, std::vector<const AprVersion*> versions, ReaderOptions options,
             std::function<void()> on_hang);
  ~ReaderPool();
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  void Start();
  // Call right before the change: from now on errors are counted, not failures, and
  // descriptors opened from now on may show any version.
  void MarkEvent();
  // Call once the change is complete: O_DIRECT reads through descriptors opened before the
  // event that start after this and overlap `must_fail` (ranges of version 0) must fail.
  void MarkEventDone(std::vector<std::pair<uint64_t, uint64_t>> must_fail = {});
  // Stops every reader, waits for them (children with a deadline) and closes their descriptors;
  // idempotent.
  void Stop();

  int size() const { return options_.threads + options_.mappers; }
  const ReaderStats& stats(int reader) const;
  std::string Describe(int reader) const;  // "reader 3 (own descriptor, O_DIRECT, keeps it)"
  bool IsMapper(int reader) const { return reader >= options_.threads; }
  bool IsDirect(int reader) const;
  bool Reopens(int reader) const;  // opens the file again every few dozen reads
  // Waits until `done` holds for every reader; false on timeout.
  bool WaitForAll(const std::function<bool(const ReaderStats&)>& done,
                  std::chrono::milliseconds timeout) const;
  // Readers currently inside a read.
  int InRead() const;
  // Total exact reads and bytes; a line per kind of reader (with its errors after the event).
  uint64_t TotalReads() const;
  uint64_t TotalBytes() const;
  std::string Summary() const;
  // Problems of the pool itself: a mapper process that crashed or did not stop.
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  struct Handle;
  struct Slot;
  struct Shared;

  void ThreadLoop(int reader);
  int MapperLoop(int reader);
  void Monitor();
  // Compares what a read returned with the versions `*mask` allows; narrows the mask.
  // Returns false on wrong bytes (recorded).
  bool Check(int reader, std::atomic<uint32_t>* mask, uint64_t offset, uint64_t length,
             const char* data, uint64_t count, int error, const char* how);
  // A read to make: log-uniform length, offsets biased to the boundaries and the end of file.
  // `inside`: within [0, size) (a mapping cannot be read past its end).
  std::pair<uint64_t, uint64_t> PickRange(std::mt19937_64& rng, uint64_t size, bool inside) const;
  uint32_t MaskForNewHandle() const;
  uint64_t SizeFor(uint32_t mask) const;
  void Fail(int reader, const std::string& what);
  void CountError(int reader, bool after_event, int outcome, int err);

  const std::string path_;
  const std::vector<const AprVersion*> versions_;
  const ReaderOptions options_;
  std::function<void()> on_hang_;
  std::vector<uint64_t> boundaries_;  // of every version
  std::vector<std::pair<uint64_t, uint64_t>> must_fail_;  // written before event_done is set
  Shared* shared_ = nullptr;  // MAP_SHARED: seen by the mapper processes
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int> slot_of_;  // reader -> slot
  std::vector<std::thread> threads_;
  std::vector<Child> mappers_;
  std::thread monitor_;
  std::atomic<bool> monitor_stop_{false};
  std::atomic<bool> hang_reported_{false};
  bool started_ = false, stopped_ = false;
  std::vector<std::string> problems_;
};

}  // namespace aprfs_itest
