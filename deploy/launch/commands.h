// The command lines pushpull-launch starts its children with: the scheduler's, each server's and
// each worker's, each given the flags common/daemon/daemon_flags.h says that daemon takes (their values
// the launcher's), besides what the launcher works out itself (ports, ranks, the job's shape).
#pragma once

#include <string>
#include <vector>

#include "deploy/launch/process.h"
#include "pushpull/status.h"

namespace pushpull {
namespace launch {

// What a job is to run, besides the flags the launcher passes on (common/daemon/daemon_flags.h, read
// from gflags where they are used).
struct JobOptions {
  std::string bin_dir;  // where pushpull-scheduler and pushpull-server are
  Command worker;       // each worker's command: pushpull-worker and its flags (exe ""), or the user's
  int servers = 1;
  int workers = 1;
  int metrics_port = -1;  // the scheduler's; server s gets this + 1 + s (<= 0: the same to each)
  int grace_ms = 5000;
  int max_worker_restarts = 3;
  int restart_delay_ms = 1000;
  std::string restore_from;  // the scheduler's --restore_from for this run (a restart's may differ)
};

// The scheduler's: on a free port of the loopback, writing its address to endpoint_file and its
// verdict to verdict_file.
Command SchedulerCommand(const JobOptions& o, const std::string& endpoint_file, const std::string& verdict_file);
// Server `rank`'s.
Command ServerCommand(const JobOptions& o, const std::string& scheduler, int rank);
// Worker `rank`'s: the job in its environment (pushpull::ClientOptions reads it), and for
// pushpull-worker also as flags, before the user's (which may not override them: RefuseWorkerFlags).
Command WorkerCommand(const JobOptions& o, const std::string& scheduler, int rank);

// pushpull-worker's flags after "--": refused (exit 2) where they would undo what the launcher
// gives each worker. Returns 0 when they are fine.
int RefuseWorkerFlags(const std::vector<std::string>& worker_args, int servers, int workers);

// The file `command` names: itself when it holds a '/', else the first executable of that name
// in PATH, as a shell finds it. An error says why there is none.
Result<std::string> FindCommand(const std::string& command);

}  // namespace launch
}  // namespace pushpull
