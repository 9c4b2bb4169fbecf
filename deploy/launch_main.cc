// pushpull-launch: a whole job on this machine. Starts the scheduler on a free port, S servers
// and W workers (each the user's command, told where the job is through its environment, or
// pushpull-worker), prefixes every line of their output with the process's role and rank, and
// returns the job's exit status. Stops every child on Ctrl-C or as soon as a process fails;
// children die with the launcher (PR_SET_PDEATHSIG), so nothing is orphaned. The job itself is
// deploy/launch/job.h; this file is its flags.
#include <gflags/gflags.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/daemon/daemon_flags.h"
#include "common/daemon/flags.h"
#include "deploy/launch/commands.h"
#include "deploy/launch/job.h"
#include "pushpull/table.h"

// The launcher's own flags. Those it passes on to the daemons (--consistency, --heartbeat_*,
// --checkpoint_dir, ...) are common/daemon/daemon_flags.cc's.
DEFINE_int32(servers, 1, "servers to start");
DEFINE_int32(workers, 1, "workers to start");
DEFINE_int32(max_worker_restarts, 3, "--on_worker_death=wait: new workers started in dead ones' places, in all");
DEFINE_int32(metrics_port, -1,
             "serve /metrics in the Prometheus text format (docs/monitoring.md): the scheduler at "
             "this port, server s at this port + 1 + s (-1: not served; 0: free ports, each logged by its daemon)");
DEFINE_int32(grace_ms, 5000, "after the job ends or fails, how long children get to exit before SIGKILL");
DEFINE_string(bin_dir, "", "where the pushpull binaries are (default: beside this one)");
DEFINE_int32(max_restarts, 0,
             "when a process dies or fails (not for bad flags, exit 2, or a missed target, "
             "exit 3), start the job again this many times at most: from the newest checkpoint this job "
             "wrote in --checkpoint_dir when there is one");
DEFINE_int32(
    restart_delay_ms, 1000,
    "with --max_restarts: wait this long before the first restart, twice as long "
    "before each next one (at most 60 s, or this if longer), so that a cause that takes time to clear can clear");

namespace {

using pushpull::launch::Command;

constexpr char kUsage[] =
    "runs a pushpull job on this machine: a scheduler, the servers, and the workers, each\n"
    "of which runs your command (or pushpull-worker with the flags after \"--\").\n"
    "usage: pushpull-launch [--servers=S] [--workers=W] [--consistency=bsp|ssp:K|asp]\n"
    "       [--checkpoint_dir=DIR] [--restore_from=DIR] [--max_restarts=N] -- CMD [ARGS...]\n"
    "   or: pushpull-launch [flags] -- <pushpull-worker flags>\n"
    "Every worker finds the job in its environment: PUSHPULL_SCHEDULER, PUSHPULL_RANK,\n"
    "PUSHPULL_NUM_WORKERS, PUSHPULL_NUM_SERVERS, PUSHPULL_CONSISTENCY,\n"
    "PUSHPULL_HEARTBEAT_INTERVAL_MS, PUSHPULL_HEARTBEAT_TIMEOUT_MS, PUSHPULL_REGISTER_TIMEOUT_MS\n"
    "(pushpull::ClientOptions reads them). A worker that exits 0 without Client::Finish()\n"
    "is taken for dead. The last line names the job's first cause. Exit status: 0 the job\n"
    "finished; 1 a process died; 2 bad flags or setup; 3 a missed target; 4 the training\n"
    "diverged (NaN or Inf); 127 CMD not found; 128+N signal N.\n"
    "examples: pushpull-launch --servers=2 --workers=2 -- ./my_trainer --epochs=3\n"
    "          pushpull-launch --servers=2 --workers=3 --consistency=ssp:1 -- --app=linreg";

}  // namespace

int main(int argc, char** argv) {
  // -h, as most commands take it, before "--" (after it, it is the workers').
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    if (std::strcmp(argv[i], "-h") == 0) argv[i] = const_cast<char*>("--help");
  pushpull::UseLauncherDefaults();  // (before the command line, which may set them)
  pushpull::ParseFlagsOrHelp(
      &argc, &argv, kUsage, pushpull::DaemonFlagSelection("launch_main", pushpull::kEveryDaemonFlag, true),
      true,  // leaves what follows "--" in argv
      "your command, or the flags for pushpull-worker (--app=..., see its --help), go after \"--\"");
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {  // nothing to run: the usage, not a job that fails for want of --app
    std::fprintf(stderr,
                 "%s\n\npushpull-launch: nothing to run: give your command, or pushpull-worker flags, after "
                 "\"--\" (--help lists every flag)\n",
                 kUsage);
    return 2;
  }
  // After "--": a command (its first word does not begin with "-"), which every worker runs, told
  // where the job is through its environment; or flags for pushpull-worker, which every worker
  // runs with them.
  const bool own_command = !args.empty() && args[0].rfind("-", 0) != 0;
  Command worker;
  if (own_command) {
    auto exe = pushpull::launch::FindCommand(args[0]);
    if (!exe.ok()) {
      std::fprintf(stderr, "pushpull-launch: %s; no process started\n", exe.status().message().c_str());
      return 127;
    }
    worker.argv = args;
    worker.exe = *exe;
  } else if (int refused = pushpull::launch::RefuseWorkerFlags(args, FLAGS_servers, FLAGS_workers); refused != 0) {
    return refused;
  }
  if (FLAGS_on_worker_death != "abort" && FLAGS_on_worker_death != "continue" && FLAGS_on_worker_death != "wait") {
    std::fprintf(stderr, "pushpull-launch: --on_worker_death must be abort, continue or wait\n");
    return 2;
  }
  if (FLAGS_grace_ms < 0 || FLAGS_max_restarts < 0 || FLAGS_restart_delay_ms < 0 || FLAGS_max_worker_restarts < 0 ||
      FLAGS_replacement_timeout_s < 1) {
    std::fprintf(stderr,
                 "pushpull-launch: --grace_ms, --max_restarts, --max_worker_restarts and --restart_delay_ms "
                 "must be >= 0, --replacement_timeout_s >= 1\n");
    return 2;
  }
  if (FLAGS_metrics_port < -1 || FLAGS_metrics_port > 65535 - FLAGS_servers) {
    std::fprintf(stderr,
                 "pushpull-launch: --metrics_port must be -1 (not served), 0 (free ports, each logged) or in "
                 "[1, %d] (the servers take the "
                 "%d ports after it)\n",
                 65535 - FLAGS_servers, FLAGS_servers);
    return 2;
  }
  // What every node would refuse, refused before any starts, so that the one useful line is not
  // buried among every node's "stopped while waiting".
  if (auto c = pushpull::ParseConsistency(FLAGS_consistency); !c.ok()) {
    std::fprintf(stderr, "pushpull-launch: --consistency: %s\n", c.status().message().c_str());
    return 2;
  }
  if (FLAGS_heartbeat_timeout_ms < 1 || FLAGS_heartbeat_interval_ms < 1 ||
      FLAGS_heartbeat_interval_ms > FLAGS_heartbeat_timeout_ms / 2) {
    std::fprintf(stderr,
                 "pushpull-launch: nodes that heartbeat every %d ms, but the scheduler declares a node dead "
                 "after %d ms of silence: --heartbeat_interval_ms must be >= 1 and at most half of "
                 "--heartbeat_timeout_ms\n",
                 FLAGS_heartbeat_interval_ms, FLAGS_heartbeat_timeout_ms);
    return 2;
  }
  const std::string dir = FLAGS_bin_dir.empty() ? pushpull::ExecutableDir() : FLAGS_bin_dir;
  if (!own_command) {
    worker.argv = {dir + "/pushpull-worker"};
    worker.argv.insert(worker.argv.end(), args.begin(), args.end());
  }
  for (const char* b : {"pushpull-scheduler", "pushpull-server", "pushpull-worker"}) {
    if (own_command && std::string(b) == "pushpull-worker") continue;
    if (access((dir + "/" + b).c_str(), X_OK) != 0) {
      std::fprintf(stderr, "pushpull-launch: %s/%s not found (build with make, or set --bin_dir)\n", dir.c_str(), b);
      return 2;
    }
  }
  pushpull::launch::CatchStopSignals();
  pushpull::launch::JobOptions job;
  job.bin_dir = dir;
  job.worker = worker;
  job.servers = FLAGS_servers;
  job.workers = FLAGS_workers;
  job.metrics_port = FLAGS_metrics_port;
  job.grace_ms = FLAGS_grace_ms;
  job.max_worker_restarts = FLAGS_max_worker_restarts;
  job.restart_delay_ms = FLAGS_restart_delay_ms;
  job.restore_from = FLAGS_restore_from;
  return pushpull::launch::RunJobs(job, FLAGS_max_restarts, FLAGS_checkpoint_dir);
}
