// SIGINT/SIGTERM handling for the daemons: the first signal asks for a clean stop through the
// callback's flag; a second one exits at once.
#pragma once

#include <atomic>
#include <functional>

namespace pushpull {

// Installs handlers; StopRequested() turns true on the first SIGINT or SIGTERM.
void InstallStopSignals();
bool StopRequested();
// Installs the handlers and calls stop() (once, from a detached watcher thread) on the first signal.
void CallOnStopSignal(std::function<void()> stop);

}  // namespace pushpull
