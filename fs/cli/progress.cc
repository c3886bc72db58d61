#include "fs/cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "fs/cli/commands.h"

namespace aprfs {
namespace {

constexpr auto kTerminalRedraw = std::chrono::milliseconds(200);
constexpr auto kLineInterval = std::chrono::seconds(10);
constexpr int kBarWidth = 24;

}  // namespace

std::string RateText(double bytes_per_second) {
  const char* units[] = {"B/s", "kB/s", "MB/s", "GB/s"};
  int unit = 0;
  while (bytes_per_second >= 1000 && unit < 3) {
    bytes_per_second /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", bytes_per_second, units[unit]);
  return text;
}

std::string DurationText(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 360000) return "--:--";
  auto total = static_cast<long>(std::lround(seconds));
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(text, sizeof(text), "%ld:%02ld", total / 60, total % 60);
  }
  return text;
}

Progress::Progress(std::string label, uint64_t total, uint64_t baseline, FILE* out)
    : label_(std::move(label)),
      total_(total),
      baseline_(std::min(baseline, total)),
      out_(out),
      terminal_(isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  if (!finished_ && terminal_) std::fputc('\n', out_);
}

void Progress::Update(uint64_t done) {
  done = std::min(done, total_);
  const auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (now - last_draw_ < kTerminalRedraw && done != total_) return;
  } else {
    int decile = total_ ? static_cast<int>(done * 10 / total_) : 10;
    if (decile == last_decile_ && now - last_draw_ < kLineInterval) return;
    last_decile_ = decile;
  }
  last_draw_ = now;
  last_done_ = done;
  Draw(done, false, "");
}

void Progress::Finish(const std::string& outcome) {
  if (finished_) return;
  finished_ = true;
  Draw(last_done_, true, outcome);
}

void Progress::Draw(uint64_t done, bool final, const std::string& outcome) {
  if (final) done = last_done_;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const uint64_t fresh = done > baseline_ ? done - baseline_ : 0;
  const double rate = seconds > 0.05 ? fresh / seconds : 0;
  const double eta = rate > 0 ? (total_ - done) / rate : NAN;
  const double fraction = total_ ? static_cast<double>(done) / total_ : 1.0;
  std::string line = label_ + " ";
  if (terminal_) {
    int filled = static_cast<int>(fraction * kBarWidth);
    line += "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "] ";
  }
  char numbers[160];
  // Under a tenth of a second there is no meaningful rate.
  std::snprintf(numbers, sizeof(numbers), "%3d%% %s / %s  %s", static_cast<int>(fraction * 100),
                HumanBytes(done).c_str(), HumanBytes(total_).c_str(),
                seconds > 0.1 ? RateText(rate).c_str() : "-");
  line += numbers;
  if (final) {
    line += "  in " + DurationText(seconds) + "  " + outcome;
  } else {
    line += "  ETA " + DurationText(eta);
  }
  if (terminal_) {
    // \r and clear-to-end: the bar is redrawn in place.
    std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace aprfs
