// pushpull-server: one shard holder (see server/server.h).
#include <gflags/gflags.h>

#include <algorithm>

#include "common/daemon/cpus.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/flags.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/signals.h"
#include "common/wire.h"
#include "server/server.h"

// (The flags pushpull-launch also takes and passes on to this daemon are common/daemon/daemon_flags.cc's.)
DEFINE_string(scheduler, "tcp://127.0.0.1:7000", "address of pushpull-scheduler");
DEFINE_string(bind_host, "0.0.0.0", "interface to listen on");
DEFINE_string(advertise_host, "127.0.0.1", "host name or IP workers use to reach this server");
DEFINE_int32(port, 0, "TCP port to listen on (0: any free port)");
DEFINE_int32(advertise_port, 0,
             "TCP port workers use to reach this server, when it is not --port (NAT, a forwarded or mapped port; "
             "0: the port it listens on)");
DEFINE_int32(scheduler_timeout_ms, 15000, "exit when the scheduler is silent this long, once registered");
DEFINE_int32(connect_timeout_ms, 10000,
             "a scheduler address that does not resolve, or whose port refuses connections, this long fails "
             "registration at once with the reason (raise it where the scheduler may start later, as a pod's "
             "DNS name resolves late); a scheduler that answers is waited for within --register_timeout_ms");
DEFINE_int32(max_message_mb, 2048, "larger messages are dropped (0 or less: no limit)");
DEFINE_int32(rank, -1, "ask the scheduler for this rank (-1: any free one)");
DEFINE_int32(copy_on_write_wait_ms, 1000,
             "a push waits at most this long for a pull reply to be sent, then copies over the budget (logged)");
DEFINE_int32(metrics_port, -1,
             "serve this server's counters and gauges (requests, bytes, staleness, memory, slowest worker) at "
             "http://BIND_HOST:PORT/metrics in the Prometheus text format (-1: not served; 0: any free port, logged)");
DEFINE_bool(verbose, false, "debug logging");

int main(int argc, char** argv) {
  pushpull::ParseFlagsOrHelp(
      &argc, &argv,

      "a pushpull server: holds table shards and optimizer state, applies pushes, answers pulls.\n"
      "usage: pushpull-server --scheduler=tcp://HOST:PORT [--advertise_host=MY_IP]",
      pushpull::DaemonFlagSelection("server_main", pushpull::kServerFlag));
  pushpull::RefuseArguments(argc, argv);
  pushpull::TuneMallocForLargeMessages();
  pushpull::SetLogTag("server");
  if (FLAGS_verbose) pushpull::SetLogLevel(pushpull::LogLevel::kDebug);
  {
    // A scheduler on another host with this server advertising loopback: the job would start, and
    // remote workers fail only at their request deadlines.
    auto loopback = [](const std::string& h) {
      return h.rfind("127.", 0) == 0 || h == "localhost" || h == "::1" || h == "[::1]";
    };
    std::string host = FLAGS_scheduler;
    if (host.rfind("tcp://", 0) == 0) host.erase(0, 6);
    if (const size_t colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
    const bool tcp = FLAGS_scheduler.rfind("tcp://", 0) == 0 && FLAGS_scheduler.rfind(':') > 5;  // (else refused below)
    if (tcp && !host.empty() && !loopback(host) && loopback(FLAGS_advertise_host))
      PP_LOG(Warning) << "the scheduler is at " << FLAGS_scheduler << " but this server advertises "
                      << FLAGS_advertise_host << ": workers on other hosts cannot reach it (give --advertise_host="
                      << "this host's name or IP)";
  }
  pushpull::server::ServerOptions o;
  o.control.scheduler = FLAGS_scheduler;
  o.control.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  o.control.scheduler_timeout_ms = FLAGS_scheduler_timeout_ms;
  o.control.register_timeout_ms = FLAGS_register_timeout_ms;
  o.control.connect_timeout_ms = FLAGS_connect_timeout_ms;
  o.control.requested_rank = FLAGS_rank;
  o.bind_host = FLAGS_bind_host;
  o.advertise_host = FLAGS_advertise_host;
  o.port = FLAGS_port;
  o.advertise_port = FLAGS_advertise_port;
  if (FLAGS_update_threads < 0 || FLAGS_update_threads > static_cast<int>(pushpull::kMaxValueFrames)) {
    PP_LOG(Error) << "--update_threads must be in [0, " << pushpull::kMaxValueFrames
                  << "] (0: one per core left after the I/O thread), not " << FLAGS_update_threads;
    return 2;
  }
  const int cores = pushpull::UsableCores();  // (affinity and cgroup quota: a container's CPUs, not the node's)
  // Default: the cores left after the I/O thread, at most one per values frame a pull reply may carry.
  o.update_threads = FLAGS_update_threads > 0 ? FLAGS_update_threads
                                              : std::clamp(cores - 1, 1, static_cast<int>(pushpull::kMaxValueFrames));
  o.max_message_bytes = int64_t(FLAGS_max_message_mb) << 20;
  o.stats_every_ms = int64_t(std::max(0, FLAGS_stats_every_s)) * 1000;
  o.copy_on_write_budget_bytes = size_t(std::max(0, FLAGS_copy_on_write_budget_mb)) << 20;
  o.copy_on_write_wait_ms = std::max(1, FLAGS_copy_on_write_wait_ms);
  if (FLAGS_max_table_mb < 0) {
    PP_LOG(Error) << "--max_table_mb must be >= 0 (0: no limit), not " << FLAGS_max_table_mb;
    return 2;
  }
  if (FLAGS_max_table_mb > 0) o.max_table_bytes = size_t(FLAGS_max_table_mb) << 20;
  o.metrics_port = FLAGS_metrics_port;
  auto s = pushpull::server::Server::Create(o);
  if (!s.ok()) {
    PP_LOG(Error) << s.status().ToString();
    return 2;
  }
  if ((*s)->metrics_port() >= 0)
    PP_LOG(Info) << "metrics at http://" << (FLAGS_bind_host == "0.0.0.0" ? FLAGS_advertise_host : FLAGS_bind_host)
                 << ":" << (*s)->metrics_port() << "/metrics";
  auto on_stop = pushpull::CallOnStopSignal([&] { (*s)->Stop(); });
  pushpull::Status st = (*s)->Run();
  if (!st.ok()) PP_LOG(Error) << st.ToString();
  // 2: a setting no run of this job can get past (the scheduler refused it at registration), or
  // a checkpoint it cannot restore from (a damaged or missing file): pushpull-launch does not
  // restart into the same failure.
  const pushpull::Code c = st.code();
  return st.ok() ? 0 : pushpull::IsSetupError(c) || c == pushpull::Code::kCorruption ? 2 : 1;
}
