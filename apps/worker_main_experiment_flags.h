// pushpull-worker's experiment flags: stragglers injected to study the consistency models
// (apps/experiments/run.sh, `make experiments`). Defined apart from the user's flags, so that
// --help lists them under a heading of their own (this file's name) after those.
#pragma once

#include "apps/app.h"
#include "pushpull/status.h"

namespace pushpull {

// The injection the experiment flags ask for; InvalidArgument naming the flag for a bad value.
Status ParseExperimentFlags(InjectionOptions* out);

}  // namespace pushpull
