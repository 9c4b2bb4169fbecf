// The contract between pushpull-launch and the worker processes it starts, client side: where
// the job is comes in through the environment (read into ClientOptions), and a worker that
// finished says so back through a pipe, so that the launcher can tell a worker that exited 0
// after Finish() from one that left the job early.
#pragma once

#include "pushpull/client.h"
#include "pushpull/status.h"

namespace pushpull {
namespace internal {

// What pushpull-launch sets in every worker's environment.
inline constexpr char kEnvScheduler[] = "PUSHPULL_SCHEDULER";      // tcp://host:port
inline constexpr char kEnvRank[] = "PUSHPULL_RANK";                // this worker's rank
inline constexpr char kEnvNumWorkers[] = "PUSHPULL_NUM_WORKERS";   // the job's workers
inline constexpr char kEnvNumServers[] = "PUSHPULL_NUM_SERVERS";   // the job's servers
inline constexpr char kEnvConsistency[] = "PUSHPULL_CONSISTENCY";  // bsp | ssp:K | asp
inline constexpr char kEnvHeartbeatIntervalMs[] = "PUSHPULL_HEARTBEAT_INTERVAL_MS";
inline constexpr char kEnvHeartbeatTimeoutMs[] = "PUSHPULL_HEARTBEAT_TIMEOUT_MS";  // the scheduler's
inline constexpr char kEnvSchedulerTimeoutMs[] = "PUSHPULL_SCHEDULER_TIMEOUT_MS";
inline constexpr char kEnvRegisterTimeoutMs[] = "PUSHPULL_REGISTER_TIMEOUT_MS";
inline constexpr char kEnvConnectTimeoutMs[] = "PUSHPULL_CONNECT_TIMEOUT_MS";  // ClientOptions::connect_timeout_ms
// A pipe's write end the worker writes "finished\n" to once Finish() succeeded.
inline constexpr char kEnvStatusFd[] = "PUSHPULL_STATUS_FD";

// The options with every field left at its default filled from the environment, then from the
// built-in defaults (ClientOptions says which). InvalidArgument naming the variable when a value
// set there does not parse.
Result<ClientOptions> ResolveOptions(ClientOptions o);

// Tells the launcher this process was started by (kEnvStatusFd) that its worker finished. Does
// nothing when there is no such launcher.
void TellLauncherFinished();

}  // namespace internal
}  // namespace pushpull
