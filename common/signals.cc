#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace pushpull {
namespace {
std::atomic<int> g_signals{0};
void OnSignal(int sig) {
  if (g_signals.fetch_add(1) >= 1) _exit(128 + sig);
}
}  // namespace

void InstallStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool StopRequested() { return g_signals.load() > 0; }

void CallOnStopSignal(std::function<void()> stop) {
  InstallStopSignals();
  std::thread([stop = std::move(stop)] {
    while (!StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop();
  }).detach();
}

}  // namespace pushpull
