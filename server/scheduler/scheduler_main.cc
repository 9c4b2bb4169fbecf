// pushpull-scheduler: the job's control plane (see server/scheduler/scheduler.h).
#include <gflags/gflags.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "common/daemon/daemon_flags.h"
#include "common/daemon/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "server/scheduler/scheduler.h"

// (The flags pushpull-launch also takes and passes on to this daemon are common/daemon/daemon_flags.cc's.)
DEFINE_int32(num_servers, 0, "servers the job has (required); the job starts when all have registered");
DEFINE_int32(num_workers, 0, "workers the job has (required)");
DEFINE_string(bind_host, "0.0.0.0", "interface to listen on");
DEFINE_string(advertise_host, "127.0.0.1",
              "host name or IP written to --endpoint_file and logged as this "
              "scheduler's address (nodes reach it by their own --scheduler)");
DEFINE_int32(port, 7000, "TCP port to listen on (0: any free port; see --endpoint_file)");
DEFINE_string(endpoint_file, "", "if set, write the address nodes should use here once listening");
DEFINE_int32(metrics_port, -1,
             "serve the job's state (workers live, dying, dead, finished; servers; tables; the last checkpoint) at "
             "http://BIND_HOST:PORT/metrics in the Prometheus text format (-1: not served; 0: any free port, logged)");
DEFINE_string(verdict_file, "",
              "if set, write how the job ended here as this process exits: its exit status, a tab, and the "
              "first cause (read by pushpull-launch, so that both name the same one)");
DEFINE_bool(verbose, false, "debug logging");

namespace {

// The job's end for whoever started this scheduler: "CODE\tCAUSE\n", written whole or not at all.
void WriteVerdict(int code, const std::string& cause) {
  if (FLAGS_verdict_file.empty()) return;
  const std::string tmp = FLAGS_verdict_file + ".tmp";
  std::ofstream f(tmp);
  f << code << "\t" << cause << "\n";
  f.close();
  if (!f || std::rename(tmp.c_str(), FLAGS_verdict_file.c_str()) != 0)
    PP_LOG(Warning) << "cannot write --verdict_file " << FLAGS_verdict_file << ": " << std::strerror(errno);
}

}  // namespace

int main(int argc, char** argv) {
  pushpull::ParseFlagsOrHelp(&argc, &argv,
                             "the pushpull scheduler: membership, table creation, barriers, heartbeats, checkpoints.\n"
                             "usage: pushpull-scheduler --num_servers=S --num_workers=W [--port=7000]\n"
                             "       [--checkpoint_dir=DIR] [--restore_from=DIR]",
                             pushpull::DaemonFlagSelection("scheduler_main", pushpull::kSchedulerFlag));
  pushpull::RefuseArguments(argc, argv);
  pushpull::SetLogTag("scheduler");
  if (FLAGS_verbose) pushpull::SetLogLevel(pushpull::LogLevel::kDebug);
  if (FLAGS_on_worker_death != "abort" && FLAGS_on_worker_death != "continue" && FLAGS_on_worker_death != "wait") {
    PP_LOG(Error) << "--on_worker_death must be abort, continue or wait, not '" << FLAGS_on_worker_death << "'";
    return 2;
  }
  if (FLAGS_replacement_timeout_s < 1 || FLAGS_replacement_timeout_s > std::numeric_limits<int>::max() / 1000) {
    PP_LOG(Error) << "--replacement_timeout_s must be at least 1, not " << FLAGS_replacement_timeout_s;
    return 2;
  }
  // Required: with a default of 1, a forgotten flag would start a job that refuses every worker but one.
  if (FLAGS_num_servers < 1 || FLAGS_num_workers < 1) {
    PP_LOG(Error) << "--num_servers and --num_workers are required (at least 1 each), not " << FLAGS_num_servers
                  << " and " << FLAGS_num_workers;
    return 2;
  }
  pushpull::scheduler::SchedulerOptions o;
  o.bind_host = FLAGS_bind_host;
  o.advertise_host = FLAGS_advertise_host;
  o.port = FLAGS_port;
  o.num_servers = FLAGS_num_servers;
  o.num_workers = FLAGS_num_workers;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  o.register_timeout_ms = FLAGS_register_timeout_ms;
  o.table_timeout_ms = FLAGS_table_timeout_ms;
  o.continue_on_worker_death = FLAGS_on_worker_death == "continue";
  o.wait_for_replacement = FLAGS_on_worker_death == "wait";
  o.replacement_timeout_ms = FLAGS_replacement_timeout_s * 1000;
  // Servers write under the path as given, each from its own working directory: an absolute one.
  auto absolute = [](const std::string& p) {
    std::error_code ec;
    return p.empty() ? p : std::filesystem::absolute(p, ec).lexically_normal().string();
  };
  o.checkpoint_dir = absolute(FLAGS_checkpoint_dir);
  o.checkpoint_keep = FLAGS_checkpoint_keep;
  if (FLAGS_checkpoint_timeout_s < 1 || FLAGS_checkpoint_timeout_s > std::numeric_limits<int>::max() / 1000) {
    PP_LOG(Error) << "--checkpoint_timeout_s must be in [1, " << std::numeric_limits<int>::max() / 1000 << "], not "
                  << FLAGS_checkpoint_timeout_s;
    return 2;
  }
  o.checkpoint_timeout_ms = FLAGS_checkpoint_timeout_s * 1000;
  o.restore_from = absolute(FLAGS_restore_from);
  o.verify_restore = FLAGS_verify_restore;
  o.metrics_port = FLAGS_metrics_port;
  auto s = pushpull::scheduler::Scheduler::Create(o);
  if (!s.ok()) {
    PP_LOG(Error) << s.status().ToString();
    WriteVerdict(2, s.status().message());
    return 2;
  }
  if ((*s)->metrics_port() >= 0)
    PP_LOG(Info) << "metrics at http://" << (FLAGS_bind_host == "0.0.0.0" ? FLAGS_advertise_host : FLAGS_bind_host)
                 << ":" << (*s)->metrics_port() << "/metrics";
  if (!FLAGS_endpoint_file.empty()) {
    std::string tmp = FLAGS_endpoint_file + ".tmp";
    std::ofstream f(tmp);
    f << (*s)->address() << "\n";
    f.close();
    if (!f || std::rename(tmp.c_str(), FLAGS_endpoint_file.c_str()) != 0) {
      PP_LOG(Error) << "cannot write --endpoint_file " << FLAGS_endpoint_file << ": " << std::strerror(errno);
      return 2;
    }
  }
  // After the endpoint file: checking the checkpoint to restore may take long, and the nodes wait
  // for the scheduler meanwhile.
  if (pushpull::Status restore = (*s)->PrepareRestore(); !restore.ok()) {
    PP_LOG(Error) << restore.ToString();
    WriteVerdict(2, restore.message());
    return 2;
  }
  auto on_stop = pushpull::CallOnStopSignal([&] { (*s)->Stop(); });
  pushpull::Status st = (*s)->Run();
  // Run() keeps the cause's code: 2 for a worker's bad flags or setup, which a restart would meet
  // again; 3 a missed target; 4 a diverged model; else 1.
  const int code = pushpull::ExitCodeOf(st.code());
  WriteVerdict(code, st.ok() ? "the job finished" : st.message());
  return code;
}
