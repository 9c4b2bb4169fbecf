#include "deploy/launch/commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/daemon/daemon_flags.h"
#include "worker/job_environment.h"

namespace pushpull {
namespace launch {

namespace {

void Append(std::vector<std::string>* to, const std::vector<std::string>& args) {
  to->insert(to->end(), args.begin(), args.end());
}

}  // namespace

Command SchedulerCommand(const JobOptions& o, const std::string& endpoint_file, const std::string& verdict_file) {
  Command c{{o.bin_dir + "/pushpull-scheduler", "--port=0", "--bind_host=127.0.0.1", "--endpoint_file=" + endpoint_file,
             "--verdict_file=" + verdict_file, "--num_servers=" + std::to_string(o.servers),
             "--num_workers=" + std::to_string(o.workers), "--metrics_port=" + std::to_string(o.metrics_port)}};
  Append(&c.argv, DaemonFlagArgs(kSchedulerFlag, {{"restore_from", o.restore_from}}));
  return c;
}

Command ServerCommand(const JobOptions& o, const std::string& scheduler, int rank) {
  const int metrics_port = o.metrics_port <= 0 ? o.metrics_port : o.metrics_port + 1 + rank;
  Command c{{o.bin_dir + "/pushpull-server", "--scheduler=" + scheduler, "--bind_host=127.0.0.1",
             "--rank=" + std::to_string(rank), "--metrics_port=" + std::to_string(metrics_port)}};
  Append(&c.argv, DaemonFlagArgs(kServerFlag));
  return c;
}

Command WorkerCommand(const JobOptions& o, const std::string& scheduler, int rank) {
  Command c = o.worker;
  c.status_pipe = true;
  if (c.exe.empty()) {  // pushpull-worker
    std::vector<std::string> flags = {"--scheduler=" + scheduler};
    Append(&flags, DaemonFlagArgs(kWorkerFlag));
    flags.push_back("--rank=" + std::to_string(rank));
    c.argv.insert(c.argv.begin() + 1, flags.begin(), flags.end());
  }
  namespace env = internal;
  c.env = {std::string(env::kEnvScheduler) + "=" + scheduler,
           std::string(env::kEnvRank) + "=" + std::to_string(rank),
           std::string(env::kEnvNumWorkers) + "=" + std::to_string(o.workers),
           std::string(env::kEnvNumServers) + "=" + std::to_string(o.servers),
           std::string(env::kEnvConsistency) + "=" + FLAGS_consistency,
           std::string(env::kEnvHeartbeatIntervalMs) + "=" + std::to_string(FLAGS_heartbeat_interval_ms),
           std::string(env::kEnvHeartbeatTimeoutMs) + "=" + std::to_string(FLAGS_heartbeat_timeout_ms),
           std::string(env::kEnvRegisterTimeoutMs) + "=" + std::to_string(FLAGS_register_timeout_ms)};
  return c;
}

int RefuseWorkerFlags(const std::vector<std::string>& worker_args, int servers, int workers) {
  // The launcher gives each worker these; after "--" they would override them (every worker
  // asking for one rank, a consistency the servers' tables were not told of). Those the launcher
  // takes itself (every flag pushpull-worker takes from common/daemon/daemon_flags.h) are to be given
  // before "--".
  std::vector<std::pair<std::string, std::string>> owned = {{"--rank", ""}, {"--scheduler", ""}};
  for (const DaemonFlag& f : DaemonFlags())
    if (f.roles & kWorkerFlag) owned.emplace_back(std::string("--") + f.name, " (give it before \"--\")");
  for (const std::string& arg : worker_args) {
    const std::string a =
        arg.rfind("--", 0) == 0 || arg.rfind("-", 0) != 0 ? arg : "-" + arg;  // (gflags takes -flag too)
    for (const auto& [own, hint] : owned)
      if (a == own || a.rfind(own + "=", 0) == 0) {
        std::fprintf(stderr, "pushpull-launch: %s is the launcher's to give each worker%s; not after \"--\"\n",
                     own.c_str(), hint.c_str());
        return 2;
      }
  }
  if (servers < 1 || workers < 1) {
    std::fprintf(stderr, "pushpull-launch: --servers and --workers must be >= 1\n");
    return 2;
  }
  // A worker's --metrics_port after "--" goes to every worker: one port for them all binds for one
  // only (the others exited 2 and the job failed on "bad flags"). 0 gives each a free port.
  for (size_t i = 0; i < worker_args.size() && workers > 1; ++i) {
    const std::string& a = worker_args[i];
    std::string value;
    if (a.rfind("--metrics_port=", 0) == 0 || a.rfind("-metrics_port=", 0) == 0)
      value = a.substr(a.find('=') + 1);
    else if ((a == "--metrics_port" || a == "-metrics_port") && i + 1 < worker_args.size())
      value = worker_args[i + 1];
    else
      continue;
    if (std::atoi(value.c_str()) > 0) {
      std::fprintf(stderr,
                   "pushpull-launch: --metrics_port=%s after \"--\" would have all %d workers bind port %s; "
                   "give 0 there (a free port each, logged) or run one worker\n",
                   value.c_str(), workers, value.c_str());
      return 2;
    }
  }
  return 0;
}

Result<std::string> FindCommand(const std::string& command) {
  auto runnable = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (command.find('/') != std::string::npos) {
    if (runnable(command)) return command;
    return Status::NotFound("command '" + command +
                            "': " + (access(command.c_str(), F_OK) != 0 ? "no such file" : "not an executable file"));
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > begin ? path.substr(begin, end - begin) : ".";
    if (runnable(dir + "/" + command)) return dir + "/" + command;
    begin = end + 1;
  }
  return Status::NotFound("command '" + command + "' not found in PATH (" + path + ")");
}

}  // namespace launch
}  // namespace pushpull
