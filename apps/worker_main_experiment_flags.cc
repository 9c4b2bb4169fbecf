// pushpull-worker's experiment flags (apps/worker_main_experiment_flags.h). gflags' --help groups
// flags by the file that defines them: these come under this file's name, after the user's.
#include "apps/worker_main_experiment_flags.h"

#include <gflags/gflags.h>

#include <cmath>
#include <map>
#include <string>

DEFINE_string(straggler, "", "experiments: RANK:MS[,RANK:MS]: these workers sleep MS milliseconds every clock");
DEFINE_double(random_delay_p, 0, "experiments: each clock, every worker sleeps with this probability ...");
DEFINE_double(random_delay_ms, 0, "experiments: ... an exponential time with this mean (ms)");
DEFINE_string(slowdown, "", "experiments: RANK:FACTOR[,...]: these workers' compute takes FACTOR times as long");

namespace pushpull {

Status ParseExperimentFlags(InjectionOptions* out) {
  std::map<int, double> fixed;
  PP_RETURN_IF_ERROR(InjectionOptions::ParseRankMap("straggler", FLAGS_straggler, &fixed));
  for (auto& [r, ms] : fixed) {
    if (ms != std::floor(ms) || ms > 3600000)
      return Status::InvalidArgument("--straggler: " + std::to_string(r) + ":" + std::to_string(ms) +
                                     ": the milliseconds must be a whole number, at most an hour");
    out->fixed_delay_ms[r] = static_cast<int>(ms);
  }
  PP_RETURN_IF_ERROR(InjectionOptions::ParseRankMap("slowdown", FLAGS_slowdown, &out->slowdown));
  // (NaN compares false both ways: refused with the rest.)
  if (!(FLAGS_random_delay_p >= 0 && FLAGS_random_delay_p <= 1) || !(FLAGS_random_delay_ms >= 0) ||
      !std::isfinite(FLAGS_random_delay_ms))
    return Status::InvalidArgument("--random_delay_p must be in [0, 1] and --random_delay_ms >= 0");
  out->random_delay_p = FLAGS_random_delay_p;
  out->random_delay_mean_ms = FLAGS_random_delay_ms;
  return Status::OK();
}

}  // namespace pushpull
