#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/mutex.h"

namespace pushpull {
namespace {
std::atomic<int> g_signals{0};
void OnSignal(int sig) {
  if (g_signals.fetch_add(1) >= 1) {
    // A second signal: die of it (its default action, once this handler returns), so that a parent
    // sees a process killed by a signal, not one that chose to exit 128 + sig (pushpull-launch
    // takes such an exit for a deliberate one, and would not replace the worker).
    signal(sig, SIG_DFL);
    raise(sig);
  }
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

namespace {
Mutex g_stop_mu;
std::function<void()> g_stop GUARDED_BY(g_stop_mu);  // empty once disarmed
}  // namespace

StopSignalCallback CallOnStopSignal(std::function<void()> stop) {
  InstallStopSignals();
  {
    MutexLock l(&g_stop_mu);
    g_stop = std::move(stop);
  }
  std::thread([] {
    while (!StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    MutexLock l(&g_stop_mu);
    if (g_stop) g_stop();
  }).detach();
  StopSignalCallback c;
  c.armed_ = true;
  return c;
}

StopSignalCallback::~StopSignalCallback() {
  if (!armed_) return;
  MutexLock l(&g_stop_mu);
  g_stop = nullptr;
}

}  // namespace pushpull
