// SIGINT/SIGTERM handling for the daemons: the first signal asks for a clean stop through the
// callback's flag; a second one exits at once.
#pragma once

#include <atomic>
#include <functional>

namespace pushpull {

// Installs handlers; StopRequested() turns true on the first SIGINT or SIGTERM.
void InstallStopSignals();
bool StopRequested();
// Disarms the callback of CallOnStopSignal when it goes (waiting for a call in progress): keep it
// no longer than what the callback touches, so that a signal while main() returns (a launcher
// stopping every process) calls nothing on an object already gone.
class [[nodiscard]] StopSignalCallback {
 public:
  StopSignalCallback() = default;
  StopSignalCallback(StopSignalCallback&& o) noexcept : armed_(o.armed_) { o.armed_ = false; }
  StopSignalCallback& operator=(StopSignalCallback&&) = delete;
  ~StopSignalCallback();

 private:
  friend StopSignalCallback CallOnStopSignal(std::function<void()> stop);
  bool armed_ = false;
};

// Installs the handlers and calls stop() (once, from a watcher thread) on the first signal, while
// the returned object lives.
StopSignalCallback CallOnStopSignal(std::function<void()> stop);

}  // namespace pushpull
