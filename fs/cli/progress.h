#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace aprfs {

// Progress of a long job on stderr: a bar redrawn in place (bytes, rate, ETA) on a terminal;
// plain lines every 10 % or 10 s otherwise (logs, CI), so nothing floods a file.
class Progress {
 public:
  // `baseline`: bytes already done before this run (resumed work), shown but not in the rate.
  Progress(std::string label, uint64_t total, uint64_t baseline = 0, FILE* out = stderr);
  ~Progress();

  void Update(uint64_t done);
  // Ends the bar with a last line, e.g. "done" or "interrupted".
  void Finish(const std::string& outcome);

 private:
  void Draw(uint64_t done, bool final, const std::string& outcome);

  const std::string label_;
  const uint64_t total_;
  const uint64_t baseline_;
  FILE* const out_;
  const bool terminal_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  uint64_t last_done_ = 0;
  int last_decile_ = -1;
  bool finished_ = false;
};

// "12.3 MB/s" (decimal units, as download tools show rates).
std::string RateText(double bytes_per_second);
// "1:02:03" / "4:05" / "--:--" when unknown.
std::string DurationText(double seconds);

}  // namespace aprfs
