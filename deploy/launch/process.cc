#include "deploy/launch/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "worker/job_environment.h"

namespace pushpull {
namespace launch {

namespace {

volatile sig_atomic_t g_interrupted = 0;
volatile sig_atomic_t g_signals = 0;  // how many came
void OnSignal(int sig) {              // the exit code is 128 + it (130 SIGINT, 143 SIGTERM)
  g_interrupted = sig;
  g_signals = g_signals + 1;
}

}  // namespace

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int StopSignal() { return g_interrupted; }

int StopSignalsCaught() { return g_signals; }

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

}  // namespace launch
}  // namespace pushpull
