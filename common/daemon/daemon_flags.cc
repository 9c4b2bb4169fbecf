#include "common/daemon/daemon_flags.h"

#include <algorithm>

namespace pushpull {
namespace internal {

std::vector<DaemonFlag>& DaemonFlagTable() {
  static std::vector<DaemonFlag> table;
  return table;
}

bool AddDaemonFlag(DaemonFlag f) {
  DaemonFlagTable().push_back(f);
  return true;
}

}  // namespace internal
}  // namespace pushpull

// One entry: the flag (gflags: type, name, default, help) and the daemons that take it
// (DaemonRoleBits); PUSHPULL_DAEMON_FLAG_LAUNCHER_DEFAULT gives pushpull-launch a default of its own.
#define PUSHPULL_DAEMON_FLAG_LAUNCHER_DEFAULT(type, name, default_value, roles, launcher_default, help) \
  DEFINE_##type(name, default_value, help);                                                             \
  [[maybe_unused]] static const bool pp_daemon_flag_##name =                                            \
      pushpull::internal::AddDaemonFlag({#name, roles, launcher_default})
#define PUSHPULL_DAEMON_FLAG(type, name, default_value, roles, help) \
  PUSHPULL_DAEMON_FLAG_LAUNCHER_DEFAULT(type, name, default_value, roles, nullptr, help)

using pushpull::kEveryDaemonFlag;
using pushpull::kSchedulerFlag;
using pushpull::kServerFlag;
using pushpull::kWorkerFlag;

// The job's shape and its failures.
PUSHPULL_DAEMON_FLAG(string, consistency, "bsp", kWorkerFlag,
                     "consistency model of the workers' tables: bsp | ssp:K | asp (a worker not given it takes "
                     "$PUSHPULL_CONSISTENCY when set, as pushpull-launch sets it)");
PUSHPULL_DAEMON_FLAG(string, on_worker_death, "abort", kSchedulerFlag,
                     "abort: a dead worker ends the job, which names it; continue: the job goes on without it; "
                     "wait: the job waits --replacement_timeout_s for a worker to take its rank (pushpull-worker "
                     "--rank=R; pushpull-launch starts one itself, at most --max_worker_restarts times), which "
                     "resumes at the dead one's clock while the others wait for it");
// pushpull-launch: 60, not 90. It starts the new worker itself once the dead one has exited, after
// at most half of this; a job run by hand waits for someone to start one.
PUSHPULL_DAEMON_FLAG_LAUNCHER_DEFAULT(
    int32, replacement_timeout_s, 90, kSchedulerFlag, "60",
    "--on_worker_death=wait: the job is aborted when no worker took a dead one's place by then (keep it under the "
    "workers' --request_timeout_ms less --heartbeat_timeout_ms: their waits for the dead rank end there); "
    "pushpull-launch starts the new worker itself once the dead one has exited, after --restart_delay_ms doubled per "
    "replacement, at least a heartbeat timeout and at most half of this (its default is 60)");
PUSHPULL_DAEMON_FLAG(int32, heartbeat_timeout_ms, 5000, kSchedulerFlag, "a node silent this long is declared dead");
PUSHPULL_DAEMON_FLAG(int32, heartbeat_interval_ms, 500, kServerFlag | kWorkerFlag,
                     "heartbeat period: how often a server or worker tells the scheduler it is alive");
PUSHPULL_DAEMON_FLAG(int32, register_timeout_ms, 120000, kEveryDaemonFlag,
                     "how long the whole job may take to register: the scheduler aborts it then, and a server or "
                     "worker stops waiting, for a scheduler not (yet) listening too (raise it when servers restore "
                     "large checkpoints: workers wait for them within it)");
PUSHPULL_DAEMON_FLAG(int32, table_timeout_ms, 30000, kSchedulerFlag,
                     "every server must have created (filled or restored) a table by then (raise it with "
                     "--register_timeout_ms for restores of many GB)");

// The servers.
// pushpull-launch: 1, not 0 (the cores but one). Its servers share one machine's cores.
PUSHPULL_DAEMON_FLAG_LAUNCHER_DEFAULT(
    int32, update_threads, 0, kServerFlag, "1",
    "update threads, at most 64, each owning stripes of every table (a large dense table has a stripe per 1 MB "
    "block); 0: the cores this process may use (CPU affinity, cgroup quota) left after the I/O thread "
    "(pushpull-launch's default is 1: its servers share one machine's cores)");
PUSHPULL_DAEMON_FLAG(int32, stats_every_s, 30, kServerFlag,
                     "log a line of rates (pushes, pulls, MB/s), the slowest worker's clock, parked pulls and memory "
                     "this often (0: never)");
PUSHPULL_DAEMON_FLAG(int32, copy_on_write_budget_mb, 64, kServerFlag,
                     "memory for parameters that pull replies still hold while pushes go on (copy-on-write); over "
                     "it, a push waits for the reply to be sent instead (0: always wait)");
PUSHPULL_DAEMON_FLAG(int64, max_table_mb, 0, kServerFlag,
                     "memory a server's tables may hold (parameters, optimizer slots, step counts, sparse key "
                     "index); a table creation or a push or pull of new sparse keys past it is refused with "
                     "ResourceExhausted, which ends the job with a message (exit 2, not restarted) instead of the "
                     "machine killing the server (0: no limit)");

// Checkpoints.
PUSHPULL_DAEMON_FLAG(string, checkpoint_dir, "", kSchedulerFlag,
                     "directory servers write checkpoints into when the workers call Checkpoint() (a filesystem "
                     "every server and the scheduler share; empty: checkpoints off; pushpull-worker takes them with "
                     "--checkpoint_every_epochs)");
PUSHPULL_DAEMON_FLAG(int32, checkpoint_keep, 2, kSchedulerFlag, "complete checkpoints to keep; older ones are deleted");
PUSHPULL_DAEMON_FLAG(int32, checkpoint_timeout_s, 600, kSchedulerFlag,
                     "deadline of each checkpoint phase: every live worker asking, then every server writing");
PUSHPULL_DAEMON_FLAG(string, restore_from, "", kSchedulerFlag,
                     "resume the job from the newest complete checkpoint under this directory, or from this "
                     "checkpoint when it is one (DIR/ckpt-NNN: an older one, when the newest is damaged; "
                     "pushpull-checkpoint --dir=DIR lists them) (tables, optimizer state, clocks; any number of "
                     "servers)");
PUSHPULL_DAEMON_FLAG(bool, verify_restore, true, kSchedulerFlag,
                     "with --restore_from: read every file of the checkpoint once before the job starts, checking "
                     "its checksum; a damaged newest checkpoint is then passed over for the newest intact one of the "
                     "same run before it (false: servers find damage while restoring and the job fails, exit 2); "
                     "the nodes' --register_timeout_ms runs meanwhile");

namespace pushpull {

const std::vector<DaemonFlag>& DaemonFlags() { return internal::DaemonFlagTable(); }

std::vector<std::string> DaemonFlagArgs(unsigned role, const std::map<std::string, std::string>& values) {
  std::vector<std::string> args;
  for (const DaemonFlag& f : DaemonFlags()) {
    if ((f.roles & role) == 0) continue;
    const auto given = values.find(f.name);
    args.push_back(std::string("--") + f.name + "=" +
                   (given != values.end() ? given->second : gflags::GetCommandLineFlagInfoOrDie(f.name).current_value));
  }
  return args;
}

std::string DaemonRoleNames(unsigned roles) {
  if ((roles & kEveryDaemonFlag) == kEveryDaemonFlag) return "every process";
  std::vector<std::string> names;
  if (roles & kSchedulerFlag) names.push_back("scheduler");
  if (roles & kServerFlag) names.push_back(names.empty() && !(roles & kWorkerFlag) ? "each server" : "servers");
  if (roles & kWorkerFlag) names.push_back("workers");
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

void UseLauncherDefaults() {
  for (const DaemonFlag& f : DaemonFlags())
    if (f.launcher_default != nullptr)
      gflags::SetCommandLineOptionWithMode(f.name, f.launcher_default, gflags::SET_FLAGS_DEFAULT);
}

FlagSelection DaemonFlagSelection(const char* flag_file, unsigned roles, bool launcher) {
  FlagSelection s;
  s.flag_file = flag_file;
  for (const DaemonFlag& f : DaemonFlags()) {
    if ((f.roles & roles) == 0) {
      s.refused.push_back(f.name);
      continue;
    }
    s.shared.push_back(f.name);
    if (launcher) s.help_prefix[f.name] = DaemonRoleNames(f.roles) + ": ";
  }
  return s;
}

}  // namespace pushpull
