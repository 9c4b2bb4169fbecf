// pushpull-launch: a whole job on this machine. Starts the scheduler on a free port, S servers
// and W workers (each the user's command, told where the job is through its environment, or
// pushpull-worker), prefixes every line of their output with the process's role and rank, and
// returns the job's exit status. Stops every child on Ctrl-C or as soon as a process fails;
// children die with the launcher (PR_SET_PDEATHSIG), so nothing is orphaned.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster.h"
#include "common/daemon/flags.h"
#include "common/transport.h"
#include "common/wire.h"
#include "worker/job_environment.h"

DEFINE_int32(servers, 1, "servers to start");
DEFINE_int32(workers, 1, "workers to start");
DEFINE_string(consistency, "bsp", "consistency model passed to the workers: bsp | ssp:K | asp");
DEFINE_string(on_worker_death, "abort",
              "abort: a dead worker ends the job; continue: the job goes on without it; "
              "wait: the launcher starts a new worker in its place (at most --max_worker_restarts times), which "
              "resumes at the dead one's clock while the others wait");
DEFINE_int32(max_worker_restarts, 3, "--on_worker_death=wait: new workers started in dead ones' places, in all");
DEFINE_int32(replacement_timeout_s, 60,
             "--on_worker_death=wait: the scheduler aborts the job when no worker took a "
             "dead one's place by then (60 here, 90 for pushpull-scheduler run by hand: this launcher starts the "
             "new worker itself once the dead one has exited, after --restart_delay_ms doubled per replacement, "
             "at least a heartbeat timeout and at most half of this)");
DEFINE_int32(heartbeat_timeout_ms, 5000, "scheduler: a node silent this long is declared dead");
DEFINE_int32(heartbeat_interval_ms, 500, "servers and workers: heartbeat period");
DEFINE_int32(update_threads, 1,
             "update threads per server (the servers share this machine's cores; "
             "pushpull-server on a machine of its own defaults to the cores but one)");
DEFINE_int32(stats_every_s, 30, "each server logs a line of rates and state this often (0: never)");
DEFINE_int32(copy_on_write_budget_mb, 64,
             "each server: memory for parameters pull replies still hold while pushes go on "
             "(over it, a push waits for the reply to be sent)");
DEFINE_int32(register_timeout_ms, 120000,
             "every process: how long the whole job may take to register (raise it "
             "when servers restore large checkpoints: workers wait for them within it)");
DEFINE_int32(table_timeout_ms, 30000,
             "scheduler: every server must have created (filled or restored) a table by "
             "then (raise it with --register_timeout_ms for restores of many GB)");
DEFINE_int32(checkpoint_keep, 2, "scheduler: complete checkpoints to keep; older ones are deleted");
DEFINE_int32(checkpoint_timeout_s, 600,
             "scheduler: deadline of each checkpoint phase (every live worker asking, then "
             "every server writing)");
DEFINE_int64(max_table_mb, 0,
             "each server: memory its tables may hold; past it a table's growth is refused and "
             "the job ends saying so (0: no limit)");
DEFINE_int32(metrics_port, -1,
             "serve /metrics in the Prometheus text format (docs/monitoring.md): the scheduler at "
             "this port, server s at this port + 1 + s (-1: not served; 0: free ports, each logged by its daemon)");
DEFINE_int32(grace_ms, 5000, "after the job ends or fails, how long children get to exit before SIGKILL");
DEFINE_string(bin_dir, "", "where the pushpull binaries are (default: beside this one)");
DEFINE_string(checkpoint_dir, "", "scheduler: where checkpoints go (workers take them with --checkpoint_every_epochs)");
DEFINE_string(restore_from, "",
              "scheduler: resume from the newest intact checkpoint under this directory, or "
              "from this checkpoint when it is one (DIR/ckpt-NNNNNNNNNN)");
DEFINE_bool(verify_restore, true,
            "scheduler: read every file of the checkpoint to restore once before the job "
            "starts, passing over a damaged newest one (false: for checkpoints too large to read twice)");
DEFINE_int32(max_restarts, 0,
             "when a process dies or fails (not for bad flags, exit 2, or a missed target, "
             "exit 3), start the job again this many times at most: from the newest checkpoint this job "
             "wrote in --checkpoint_dir when there is one");
DEFINE_int32(
    restart_delay_ms, 1000,
    "with --max_restarts: wait this long before the first restart, twice as long "
    "before each next one (at most 60 s, or this if longer), so that a cause that takes time to clear can clear");

namespace {

volatile sig_atomic_t g_interrupted = 0;
volatile sig_atomic_t g_signals = 0;  // how many came
void OnSignal(int sig) {              // the exit code is 128 + it (130 SIGINT, 143 SIGTERM)
  g_interrupted = sig;
  g_signals = g_signals + 1;
}

// How to start a process: what to run and what it is told.
struct Command {
  Command() = default;
  explicit Command(std::vector<std::string> args) : argv(std::move(args)) {}
  std::vector<std::string> argv;  // argv[0] as given (a user's "python3")
  std::string exe;                // the file run: argv[0] found in PATH ("": argv[0] itself)
  std::vector<std::string> env;   // NAME=value set in its environment besides the launcher's
  bool status_pipe = false;       // a worker: gets PUSHPULL_STATUS_FD, the pipe it says "finished" on
};

struct Child {
  std::string name;  // "server 1"
  std::string role;
  int rank = -1;    // a server's or a worker's
  Command command;  // as started (a worker started again in a dead one's place)
  pid_t pid = -1;
  int fd = -1;  // merged stdout/stderr
  std::string partial;
  int status_fd = -1;  // read end of its status pipe (worker/job_environment.h)
  std::string said;    // what came on it
  bool exited = false;
  int status = 0;
  bool tolerated = false;        // --on_worker_death=continue let it go: no failure of the job
  bool restart_pending = false;  // --on_worker_death=wait: started again at restart_at
  std::chrono::steady_clock::time_point restart_at;
};

void Say(const std::string& s) {
  std::string line = "[launch] " + s + "\n";
  ssize_t r = write(1, line.data(), line.size());
  (void)r;
}

Child Spawn(const std::string& name, const std::string& role, const Command& command) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    perror("pipe");
    exit(1);
  }
  int status_fds[2] = {-1, -1};
  if (command.status_pipe && pipe2(status_fds, O_CLOEXEC) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t parent = getpid();
  // The child runs the launcher's signal handler until it execs: a SIGTERM of ours in between
  // would only set the child's copy of our flag, and the daemon, never told, would be killed
  // after --grace_ms (a job whose scheduler fails at once, say on a bad --restore_from, would
  // take that long and SIGKILLs to stop). Blocked over the fork; the child sets them back to
  // their default first, so that one sent meanwhile ends it.
  sigset_t stop_signals, before;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop_signals, &before);
  pid_t pid = fork();
  if (pid != 0) sigprocmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    // A child that is not there must not be signalled or waited for as pid -1 (every process).
    perror("fork");
    for (int fd : {fds[0], fds[1], status_fds[0], status_fds[1]})
      if (fd >= 0) close(fd);
    Child none;  // pid -1: the caller stops the job
    none.name = name;
    none.role = role;
    none.command = command;
    return none;
  }
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &before, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    // A process group of its own: a Ctrl-C at the terminal (SIGINT to the foreground group) reaches
    // the launcher only, which stops each child with one SIGTERM. Sent both, a child would take the
    // launcher's as a second signal and exit at once (143), without telling the job.
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    for (const std::string& e : command.env) putenv(const_cast<char*>(e.c_str()));
    if (status_fds[1] >= 0) {  // kept open across exec, its number in the environment
      fcntl(status_fds[1], F_SETFD, 0);
      setenv(pushpull::internal::kEnvStatusFd, std::to_string(status_fds[1]).c_str(), 1);
    }
    std::vector<char*> args;
    for (auto& a : command.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const std::string& exe = command.exe.empty() ? command.argv[0] : command.exe;
    execv(exe.c_str(), args.data());
    std::fprintf(stderr, "exec %s: %s\n", exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Child c;
  if (status_fds[1] >= 0) {
    close(status_fds[1]);
    fcntl(status_fds[0], F_SETFL, O_NONBLOCK);
    c.status_fd = status_fds[0];
  }
  c.name = name;
  c.role = role;
  c.command = command;
  c.pid = pid;
  c.fd = fds[0];
  Say("started " + name + " (pid " + std::to_string(pid) + ")");
  return c;
}

// Forwards complete lines with the child's name in front.
void Drain(Child& c, bool flush) {
  char buf[65536];
  while (c.fd >= 0) {
    ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n > 0) {
      c.partial.append(buf, n);
      continue;
    }
    if (n == 0) {
      close(c.fd);
      c.fd = -1;
      flush = true;
    }
    break;
  }
  size_t pos;
  while ((pos = c.partial.find('\n')) != std::string::npos) {
    std::string line = c.name + " | " + c.partial.substr(0, pos + 1);
    ssize_t r = write(1, line.data(), line.size());
    (void)r;
    c.partial.erase(0, pos + 1);
  }
  if (flush && !c.partial.empty()) {
    std::string line = c.name + " | " + c.partial + "\n";
    ssize_t r = write(1, line.data(), line.size());
    (void)r;
    c.partial.clear();
  }
}

// Reads what the worker said on its status pipe so far; closes it at its end.
void ReadStatus(Child& c) {
  char buf[256];
  while (c.status_fd >= 0) {
    const ssize_t n = read(c.status_fd, buf, sizeof(buf));
    if (n > 0) {
      if (c.said.size() < 4096) c.said.append(buf, n);
      continue;
    }
    if (n == 0) {
      close(c.status_fd);
      c.status_fd = -1;
    }
    break;
  }
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

bool Failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// What an exit status means for the job, as the binaries' own exit codes say it (ExitCodeOf).
pushpull::Code CodeOfExit(int status) {
  if (!WIFEXITED(status)) return pushpull::Code::kUnavailable;
  switch (WEXITSTATUS(status)) {
    case 2: return pushpull::Code::kInvalidArgument;
    case 3: return pushpull::Code::kTargetMissed;
    case 4: return pushpull::Code::kDiverged;
    case 127: return pushpull::Code::kNotFound;
    default: return pushpull::Code::kUnavailable;
  }
}

// Tells the scheduler which process it counts exited, and of what (kNodeExited): the job's
// verdict then names it at once, not a heartbeat timeout later, nor a process stopped because
// of it. Best effort: a scheduler that is gone is the launcher's own verdict.
class ExitReporter {
 public:
  void Connect(const std::string& scheduler) {
    pushpull::SocketOptions o;
    o.linger_ms = 1000;  // (the last report goes out before the launcher exits)
    auto sock = transport_->MakeSocket(pushpull::SocketKind::kDealer, o);
    if (sock.ok() && (*sock)->Connect(scheduler).ok()) sock_ = std::move(*sock);
  }
  void Report(const Child& c, const std::string& what, pushpull::Code code, bool replaced) {
    if (!sock_ || c.rank < 0) return;
    pushpull::Header h;
    h.type = pushpull::MsgType::kNodeExited;
    h.sender_role = c.role == "server" ? pushpull::Role::kServer : pushpull::Role::kWorker;
    h.sender_rank = c.rank;
    h.clock = replaced ? 1 : 0;
    h.SetStatus(pushpull::Status(code, what));
    pushpull::SendMessage(*sock_, nullptr, h).IgnoreError();
  }

 private:
  std::shared_ptr<pushpull::Transport> transport_ = pushpull::NewZmqTransport();
  std::unique_ptr<pushpull::Socket> sock_;
};

// The scheduler's word on how the job ended (its --verdict_file): exit status and first cause.
struct Verdict {
  int code = -1;  // -1: none written (the scheduler was killed, or is not done)
  std::string cause;
};
Verdict ReadVerdict(const std::string& path) {
  Verdict v;
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return v;
  const size_t tab = line.find('\t');
  if (tab == std::string::npos) return v;
  v.code = std::atoi(line.substr(0, tab).c_str());
  v.cause = line.substr(tab + 1);
  return v;
}

int RunJob(const std::string& dir, const Command& worker, const std::string& restore_from, bool* crashed);

// pushpull-worker's flags after "--": refused (exit 2) where they would undo what the launcher
// gives each worker. Returns 0 when they are fine.
int RefuseWorkerFlags(const std::vector<std::string>& worker_args) {
  // The launcher gives each worker these; after "--" they would override them (every worker
  // asking for one rank, a consistency the servers' tables were not told of).
  for (const std::string& arg : worker_args) {
    const std::string a =
        arg.rfind("--", 0) == 0 || arg.rfind("-", 0) != 0 ? arg : "-" + arg;  // (gflags takes -flag too)
    // (Those the launcher takes itself are to be given before "--".)
    for (auto [own, hint] : {std::pair<const char*, const char*>{"--rank", ""},
                             {"--scheduler", ""},
                             {"--consistency", " (give it before \"--\")"},
                             {"--heartbeat_interval_ms", " (give it before \"--\")"},
                             {"--register_timeout_ms", " (give it before \"--\")"}})
      if (a == own || a.rfind(std::string(own) + "=", 0) == 0) {
        std::fprintf(stderr, "pushpull-launch: %s is the launcher's to give each worker%s; not after \"--\"\n", own,
                     hint);
        return 2;
      }
  }
  if (FLAGS_servers < 1 || FLAGS_workers < 1) {
    std::fprintf(stderr, "pushpull-launch: --servers and --workers must be >= 1\n");
    return 2;
  }
  // A worker's --metrics_port after "--" goes to every worker: one port for them all binds for one
  // only (the others exited 2 and the job failed on "bad flags"). 0 gives each a free port.
  for (size_t i = 0; i < worker_args.size() && FLAGS_workers > 1; ++i) {
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
                   value.c_str(), FLAGS_workers, value.c_str());
      return 2;
    }
  }
  return 0;
}

// The file `command` names: itself when it holds a '/', else the first executable of that name
// in PATH, as a shell finds it. An error says why there is none.
pushpull::Result<std::string> FindCommand(const std::string& command) {
  auto runnable = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (command.find('/') != std::string::npos) {
    if (runnable(command)) return command;
    return pushpull::Status::NotFound("command '" + command + "': " +
                                      (access(command.c_str(), F_OK) != 0 ? "no such file" : "not an executable file"));
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
  return pushpull::Status::NotFound("command '" + command + "' not found in PATH (" + path + ")");
}

}  // namespace

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

int main(int argc, char** argv) {
  // -h, as most commands take it, before "--" (after it, it is the workers').
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    if (std::strcmp(argv[i], "-h") == 0) argv[i] = const_cast<char*>("--help");
  pushpull::ParseFlagsOrHelp(
      &argc, &argv, kUsage, "launch_main", true,  // leaves what follows "--" in argv
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
    auto exe = FindCommand(args[0]);
    if (!exe.ok()) {
      std::fprintf(stderr, "pushpull-launch: %s; no process started\n", exe.status().message().c_str());
      return 127;
    }
    worker.argv = args;
    worker.exe = *exe;
  } else if (int refused = RefuseWorkerFlags(args); refused != 0) {
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
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // A restart resumes from a checkpoint this launcher's job wrote (LATEST changed since it
  // started), not from one an earlier job left in the directory; else as the first run did.
  auto latest = [] {  // what LATEST names, and when it was written ("" when there is none)
    const std::string path = FLAGS_checkpoint_dir + "/LATEST";
    std::ifstream f(path);
    std::string name;
    std::getline(f, name);
    std::error_code ec;
    const auto when = std::filesystem::last_write_time(path, ec);
    return name.empty() || ec ? std::string() : name + "@" + std::to_string(when.time_since_epoch().count());
  };
  const std::string latest_at_start = FLAGS_checkpoint_dir.empty() ? "" : latest();
  std::string restore = FLAGS_restore_from;
  for (int attempt = 0;; ++attempt) {
    bool crashed = false;
    const int code = RunJob(dir, worker, restore, &crashed);
    if (code == 0 || !crashed || attempt >= FLAGS_max_restarts) return code;
    if (g_interrupted) return 128 + g_interrupted;
    const std::string now = FLAGS_checkpoint_dir.empty() ? "" : latest();
    if (!now.empty() && now != latest_at_start) restore = FLAGS_checkpoint_dir;
    const int64_t delay_ms = std::min<int64_t>(int64_t(FLAGS_restart_delay_ms) << std::min(attempt, 16),
                                               std::max(60000, FLAGS_restart_delay_ms));
    Say("restart " + std::to_string(attempt + 1) + " of " + std::to_string(FLAGS_max_restarts) + ": " +
        (restore.empty() ? "from the start (no checkpoint of this job)" : "from the newest checkpoint in " + restore) +
        ", starting in " + std::to_string(delay_ms) + " ms");
    for (const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
         !g_interrupted && std::chrono::steady_clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (g_interrupted) {
      Say("interrupted; not restarting");
      return 128 + g_interrupted;
    }
  }
}

namespace {

// One run of the job: scheduler, servers, workers, until they have all exited. *crashed: before
// any stop of ours, a process died (a signal not sent here), exited 1, or the scheduler ended the
// job (a node declared dead): what a restart may get past.
int RunJob(const std::string& dir, const Command& worker, const std::string& restore_from, bool* crashed) {
  char tmpl[] = "/tmp/pushpull-launch-XXXXXX";
  if (!mkdtemp(tmpl)) {
    perror("mkdtemp");
    return 1;
  }
  const std::string endpoint_file = std::string(tmpl) + "/scheduler";
  const std::string verdict_file = std::string(tmpl) + "/verdict";
  const std::string hb = std::to_string(FLAGS_heartbeat_interval_ms);
  std::vector<Child> children;
  children.push_back(
      Spawn("scheduler", "scheduler",
            Command{{dir + "/pushpull-scheduler", "--port=0", "--bind_host=127.0.0.1",
                     "--endpoint_file=" + endpoint_file, "--verdict_file=" + verdict_file,
                     "--num_servers=" + std::to_string(FLAGS_servers), "--num_workers=" + std::to_string(FLAGS_workers),
                     "--heartbeat_timeout_ms=" + std::to_string(FLAGS_heartbeat_timeout_ms),
                     "--on_worker_death=" + FLAGS_on_worker_death,
                     "--replacement_timeout_s=" + std::to_string(FLAGS_replacement_timeout_s),
                     "--checkpoint_dir=" + FLAGS_checkpoint_dir, "--restore_from=" + restore_from,
                     std::string("--verify_restore=") + (FLAGS_verify_restore ? "true" : "false"),
                     "--register_timeout_ms=" + std::to_string(FLAGS_register_timeout_ms),
                     "--table_timeout_ms=" + std::to_string(FLAGS_table_timeout_ms),
                     "--checkpoint_keep=" + std::to_string(FLAGS_checkpoint_keep),
                     "--checkpoint_timeout_s=" + std::to_string(FLAGS_checkpoint_timeout_s),
                     "--metrics_port=" + std::to_string(FLAGS_metrics_port)}}));
  if (children[0].pid < 0) {
    Say("cannot start the scheduler (fork failed)");
    rmdir(tmpl);  // (the scheduler wrote nothing there)
    return 1;
  }
  // The scheduler picks its port; wait for it to say which.
  std::string scheduler;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (scheduler.empty()) {
    std::ifstream f(endpoint_file);
    std::getline(f, scheduler);
    if (!scheduler.empty()) break;
    Drain(children[0], false);
    int st;
    const bool exited = waitpid(children[0].pid, &st, WNOHANG) == children[0].pid;
    if (exited || g_interrupted || std::chrono::steady_clock::now() > until) {
      Drain(children[0], true);
      Say(exited ? "the scheduler exited before it listened (its error is above)"
                 : "the scheduler did not start (no address within 30 s)");
      if (!exited) {
        kill(children[0].pid, SIGKILL);
        waitpid(children[0].pid, &st, 0);
      }
      const Verdict v = ReadVerdict(verdict_file);
      unlink(endpoint_file.c_str());
      unlink(verdict_file.c_str());
      rmdir(tmpl);
      if (g_interrupted) return 128 + g_interrupted;
      const int code = exited && WIFEXITED(st) && WEXITSTATUS(st) != 0 ? WEXITSTATUS(st) : 1;  // 2: bad flags
      Say("job failed (exit " + std::to_string(code) + "): " +
          (v.code > 0 ? v.cause
           : exited   ? "the scheduler (pid " + std::to_string(children[0].pid) + ") " + Describe(st)
                      : std::string("the scheduler did not start")));
      return code;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  unlink(endpoint_file.c_str());
  Say("scheduler at " + scheduler);
  for (int s = 0; s < FLAGS_servers; ++s) {
    children.push_back(
        Spawn("server " + std::to_string(s), "server",
              Command{{dir + "/pushpull-server", "--scheduler=" + scheduler, "--bind_host=127.0.0.1",
                       "--update_threads=" + std::to_string(FLAGS_update_threads), "--rank=" + std::to_string(s),
                       "--heartbeat_interval_ms=" + hb, "--stats_every_s=" + std::to_string(FLAGS_stats_every_s),
                       "--copy_on_write_budget_mb=" + std::to_string(FLAGS_copy_on_write_budget_mb),
                       "--max_table_mb=" + std::to_string(FLAGS_max_table_mb),
                       "--metrics_port=" +
                           std::to_string(FLAGS_metrics_port <= 0 ? FLAGS_metrics_port : FLAGS_metrics_port + 1 + s),
                       "--register_timeout_ms=" + std::to_string(FLAGS_register_timeout_ms)}}));
    children.back().rank = s;
  }
  // Every worker is told where the job is through its environment; pushpull-worker also by its
  // flags, given before the user's (which may not override them: RefuseWorkerFlags).
  const bool pushpull_worker = worker.exe.empty();
  for (int w = 0; w < FLAGS_workers; ++w) {
    Command c = worker;
    c.status_pipe = true;
    if (pushpull_worker)
      c.argv.insert(
          c.argv.begin() + 1,
          {"--scheduler=" + scheduler, "--consistency=" + FLAGS_consistency, "--heartbeat_interval_ms=" + hb,
           "--register_timeout_ms=" + std::to_string(FLAGS_register_timeout_ms), "--rank=" + std::to_string(w)});
    namespace env = pushpull::internal;
    c.env = {std::string(env::kEnvScheduler) + "=" + scheduler,
             std::string(env::kEnvRank) + "=" + std::to_string(w),
             std::string(env::kEnvNumWorkers) + "=" + std::to_string(FLAGS_workers),
             std::string(env::kEnvNumServers) + "=" + std::to_string(FLAGS_servers),
             std::string(env::kEnvConsistency) + "=" + FLAGS_consistency,
             std::string(env::kEnvHeartbeatIntervalMs) + "=" + hb,
             std::string(env::kEnvHeartbeatTimeoutMs) + "=" + std::to_string(FLAGS_heartbeat_timeout_ms),
             std::string(env::kEnvRegisterTimeoutMs) + "=" + std::to_string(FLAGS_register_timeout_ms)};
    children.push_back(Spawn("worker " + std::to_string(w), "worker", c));
    children.back().rank = w;
  }

  for (const Child& c : children) {
    if (c.pid >= 0) continue;
    Say("cannot start " + c.name + " (fork failed); stopping the job");
    for (const Child& o : children)
      if (o.pid >= 0) kill(o.pid, SIGKILL);
    for (const Child& o : children)
      if (o.pid >= 0) waitpid(o.pid, nullptr, 0);
    return 1;
  }
  int exit_code = 0;
  std::string cause;        // the first real cause of the job's failure, for the last line
  int worker_restarts = 0;  // --on_worker_death=wait
  bool stopping = false;
  bool job_finished = false;  // the scheduler exited 0: it ended the job as finished
  sig_atomic_t signals_seen = 0;
  std::chrono::steady_clock::time_point kill_at;
  ExitReporter reporter;
  reporter.Connect(scheduler);
  // A process died and the scheduler was told: it ends the job (or goes on, by its policy) naming
  // the first death. Until then the others are left running: stopped now, each would tell the job
  // it stopped on a signal, and the job's end could blame one of them.
  std::string death;
  std::chrono::steady_clock::time_point death_until;
  auto stop_all = [&](const std::string& why, int code) {
    if (stopping) return;
    stopping = true;
    if (exit_code == 0) exit_code = code;
    if (cause.empty()) cause = why;
    Say(why + "; stopping every process");
    for (auto& c : children)
      if (!c.exited) kill(c.pid, SIGTERM);
    kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(FLAGS_grace_ms);
  };

  while (true) {
    std::vector<pollfd> pfds;
    for (auto& c : children)
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    poll(pfds.data(), pfds.size(), 100);
    for (auto& c : children) Drain(c, false);
    if (g_signals != signals_seen) {
      signals_seen = g_signals;
      if (!stopping) {
        stop_all(g_interrupted == SIGTERM ? "terminated" : "interrupted", 128 + g_interrupted);
      } else {  // already stopping (a failure, or a signal before): whoever interrupts wants it over now
        Say("interrupted while stopping; killing what is left now");
        kill_at = std::chrono::steady_clock::now();
      }
    }
    bool all_exited = true;
    for (auto& c : children) {
      if (c.restart_pending) {  // a worker in a dead one's place
        all_exited = false;
        if (stopping) {
          c.restart_pending = false;
        } else if (std::chrono::steady_clock::now() >= c.restart_at) {
          Child fresh = Spawn(c.name, c.role, c.command);
          if (fresh.pid < 0) {
            c.restart_pending = false;
            stop_all("cannot start " + c.name + " again (fork failed)", 1);
          } else {
            fresh.rank = c.rank;
            c = std::move(fresh);
          }
        }
        continue;
      }
      if (c.exited) continue;
      int st;
      if (waitpid(c.pid, &st, WNOHANG) != c.pid) {
        all_exited = false;
        continue;
      }
      c.exited = true;
      Drain(c, true);
      ReadStatus(c);
      if (c.status_fd >= 0) {
        close(c.status_fd);
        c.status_fd = -1;
      }
      const std::string pid = "pid " + std::to_string(c.pid);
      std::string how = Describe(st);
      // A worker that exited 0 without finishing (its program returned before Client::Finish(),
      // or never joined) left the job early: that is its death, as an exit 1, for the job.
      if (c.role == "worker" && !stopping && !job_finished && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
          c.said.find("finished") == std::string::npos) {
        how = "exited 0 but never finished (no successful Client::Finish())";
        st = W_EXITCODE(1, 0);
      }
      c.status = st;
      const bool failed = Failed(st);
      if (stopping && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) {  // (ours, before it could heed it: just started)
        Say(c.name + " (" + pid + ") stopped by the launcher's SIGTERM");
        continue;
      }
      const std::string what = pid + " " + how;  // (as the scheduler is told it)
      if (failed || c.role == "scheduler") Say(c.name + " (" + pid + ") " + how);
      if (c.role == "scheduler") {
        // Its verdict names the first cause, with that cause's exit code.
        const Verdict v = ReadVerdict(verdict_file);
        if (!failed) {
          job_finished = true;
          death.clear();  // (it finished all the same)
          kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(FLAGS_grace_ms);
        } else if (v.code > 0) {
          if (!stopping) {  // (the scheduler's word over the launcher's own guess)
            exit_code = v.code;
            cause = v.cause;
          }
          stop_all("the scheduler ended the job: " + v.cause, v.code);
        } else {
          stop_all("the scheduler (" + pid + ") " + how + "; the job cannot go on without it", 1);
        }
        continue;
      }
      if (stopping || !failed) continue;
      if (job_finished) {
        // The job finished; a server that then missed the scheduler's last word and gave up on it,
        // or a process killed from outside meanwhile, is no failure of the job (and nothing to
        // restart: a worker killed then would otherwise restart a finished job). A worker's own
        // exit status after it finished counts (a program that checks its result after Finish).
        if (c.role == "server" || WIFSIGNALED(st))
          Say(c.name + " ended after the job finished; the job is not failed for it");
        else if (cause.empty())
          cause = c.name + " (" + what + ") after the job finished";
        continue;
      }
      const bool died = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 1);  // not a setup error, 2
      if (c.role == "worker" && died && FLAGS_on_worker_death == "continue") {
        // The scheduler goes on without it the same way, and ends the job itself if that was the
        // last worker or a server died.
        reporter.Report(c, what, CodeOfExit(st), false);
        Say(c.name + " died; the job goes on without it (--on_worker_death=continue)");
        c.tolerated = true;  // (not the job's failure when it finishes)
      } else if (c.role == "worker" && died && FLAGS_on_worker_death == "wait" && death.empty() &&
                 worker_restarts < FLAGS_max_worker_restarts) {
        // Its rank waits for a new worker (the scheduler's --on_worker_death=wait): one is
        // started with the same flags, --rank among them, once the dead one can be declared dead.
        // (At most half the scheduler's --replacement_timeout_s: a longer --restart_delay_ms, fit for
        // whole-job restarts, would start every replacement after the job had given up on it.)
        reporter.Report(c, what, CodeOfExit(st), true);
        const int64_t delay_ms =
            std::min<int64_t>({int64_t(FLAGS_restart_delay_ms) << std::min(worker_restarts, 16),
                               std::max(60000, FLAGS_restart_delay_ms), int64_t(FLAGS_replacement_timeout_s) * 500});
        ++worker_restarts;
        Say(c.name + " died; starting a new one in its place in " + std::to_string(delay_ms) + " ms (" +
            std::to_string(worker_restarts) + " of " + std::to_string(FLAGS_max_worker_restarts) +
            ", --on_worker_death=wait)");
        c.restart_pending = true;
        c.restart_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
      } else {
        reporter.Report(c, what, CodeOfExit(st), false);
        if (!death.empty()) {
          // Its calls failed with the job the first death ends: not a death of its own to blame.
          Say(c.name + " stopped after " + death + " died");
          continue;
        }
        death = c.name;
        cause = c.name + " (" + what + ")";
        exit_code = pushpull::ExitCodeOf(CodeOfExit(st));  // (until the scheduler's verdict says)
        if (WEXITSTATUS(st) == 127 && WIFEXITED(st)) exit_code = 127;
        // The scheduler ends the job at its next pass; a heartbeat timeout and more is a scheduler
        // that did not hear (the report lost with its connection).
        death_until =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(FLAGS_heartbeat_timeout_ms) + 2000);
        Say("told the scheduler; waiting up to " + std::to_string((FLAGS_heartbeat_timeout_ms + 2000) / 1000) +
            " s for its verdict");
      }
    }
    if (all_exited) break;
    if (!death.empty() && !stopping && !job_finished && std::chrono::steady_clock::now() > death_until) {
      const std::string why = cause;
      stop_all(death + " failed (the scheduler did not end the job)", exit_code == 0 ? 1 : exit_code);
      cause = why;
    }
    // After the scheduler ended the job (or we are stopping), children get a grace period.
    bool sched_done = children[0].exited;
    if ((stopping || sched_done) && kill_at.time_since_epoch().count() != 0 &&
        std::chrono::steady_clock::now() > kill_at) {
      for (auto& c : children)
        if (!c.exited) {
          Say(c.name + " did not exit in time; killing it");
          kill(c.pid, SIGKILL);
        }
      stopping = true;  // what dies now, dies of this kill: not a failure of the job's own
      kill_at = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
  }
  unlink(verdict_file.c_str());
  rmdir(tmpl);
  if (exit_code == 0) {
    for (auto& c : children) {
      // After the scheduler finished the job, only the workers' own exit codes count (3: a missed
      // target), not servers nor what the grace period's kill ended.
      if (job_finished && (c.role == "server" || WIFSIGNALED(c.status))) continue;
      if (Failed(c.status) && !c.tolerated) {
        exit_code = c.role == "worker" && WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 1;
        if (cause.empty()) cause = c.name + " (pid " + std::to_string(c.pid) + ") " + Describe(c.status);
        break;
      }
    }
  }
  // A restart may get past a death (exit 1), not bad flags, a missed target, a diverged model, nor
  // an interrupt.
  *crashed = exit_code == 1;
  Say(exit_code == 0 ? "job succeeded" : "job failed (exit " + std::to_string(exit_code) + "): " + cause);
  return exit_code;
}

}  // namespace
