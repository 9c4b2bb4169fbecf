// SIGINT/SIGTERM handling for the daemons: the first signal asks for a clean stop through the
// callback's flag; a second one exits at once.
#pragma once

#include <atomic>

namespace pushpull {

// Installs handlers; StopRequested() turns true on the first SIGINT or SIGTERM.
void InstallStopSignals();
bool StopRequested();

}  // namespace pushpull
