#include "fs/cli/interrupt.h"

#include <signal.h>

#include <atomic>

namespace aprfs {
namespace {

std::atomic<bool> interrupted{false};

void OnSignal(int signal) {
  if (interrupted.exchange(true)) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }
}

}  // namespace

void CatchInterrupts() {
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool Interrupted() { return interrupted.load(); }

}  // namespace aprfs
