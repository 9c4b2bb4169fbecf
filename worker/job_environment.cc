#include "worker/job_environment.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace pushpull {
namespace internal {
namespace {

// The variable's value, or nullptr when it is unset or empty.
const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// An integer in [min, max] from the variable, or `fallback` when it is unset.
Result<int> EnvInt(const char* name, int min, int max, int fallback) {
  const char* v = Env(name);
  if (v == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < min || n > max)
    return Status::InvalidArgument(std::string("the environment's ") + name + "='" + v + "' is not a number in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  return static_cast<int>(n);
}

}  // namespace

Result<ClientOptions> ResolveOptions(ClientOptions o) {
  constexpr int kMaxInt = 2147483647;
  if (o.scheduler.empty()) {
    if (const char* v = Env(kEnvScheduler)) o.scheduler = v;
  }
  if (o.scheduler.empty())
    return Status::InvalidArgument(std::string("no scheduler to join: set ClientOptions::scheduler, or ") +
                                   kEnvScheduler + " (pushpull-launch sets it for the commands it starts)");
  if (o.requested_rank == -1) {
    PP_ASSIGN_OR_RETURN(o.requested_rank, EnvInt(kEnvRank, 0, kMaxInt, -1));
  }
  if (o.consistency.empty()) {
    const char* v = Env(kEnvConsistency);
    o.consistency = v != nullptr ? v : "bsp";
    if (v != nullptr && !ParseConsistency(o.consistency).ok())
      return Status::InvalidArgument(std::string("the environment's ") + kEnvConsistency + "='" + v +
                                     "': " + ParseConsistency(o.consistency).status().message());
  }
  if (auto c = ParseConsistency(o.consistency); !c.ok())
    return Status::InvalidArgument("ClientOptions::consistency: " + c.status().message());
  struct Field {
    int* value;
    const char* env;
    int fallback;
  };
  for (const Field& f : {Field{&o.heartbeat_interval_ms, kEnvHeartbeatIntervalMs, 500},
                         Field{&o.scheduler_timeout_ms, kEnvSchedulerTimeoutMs, 15000},
                         Field{&o.register_timeout_ms, kEnvRegisterTimeoutMs, 120000},
                         Field{&o.connect_timeout_ms, kEnvConnectTimeoutMs, 10000}}) {
    if (*f.value != 0) continue;
    PP_ASSIGN_OR_RETURN(*f.value, EnvInt(f.env, 1, kMaxInt, f.fallback));
  }
  return o;
}

void TellLauncherFinished() {
  const char* v = Env(kEnvStatusFd);
  if (v == nullptr) return;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || fd < 3 || fd > 1 << 20) return;
  // Only into the launcher's pipe: were the descriptor closed and its number reused by the
  // program for a file of its own, writing there would damage it.
  struct stat st;
  if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISFIFO(st.st_mode)) return;
  // A launcher gone meanwhile leaves nobody to tell, and its pipe's SIGPIPE must not kill the
  // program: blocked around the write, and taken back when the write raised it.
  sigset_t pipe_signal, before;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &before);
  static const char kFinished[] = "finished\n";
  if (write(static_cast<int>(fd), kFinished, sizeof(kFinished) - 1) < 0 && errno == EPIPE &&
      !sigismember(&before, SIGPIPE)) {
    const timespec now{0, 0};
    sigtimedwait(&pipe_signal, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

}  // namespace internal
}  // namespace pushpull
