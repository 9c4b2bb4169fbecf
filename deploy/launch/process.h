// pushpull-launch's children: how one is started (Spawn), its output forwarded line by line with
// its name in front (Drain), what it says on its status pipe (ReadStatus), and how it ended.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace pushpull {
namespace launch {

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

// Writes "[launch] s" as a line of the launcher's output.
void Say(const std::string& s);

// Starts `command` as a child of its own process group that dies with the launcher, its output
// on a pipe. A child of pid -1 when it could not fork (the caller stops the job).
Child Spawn(const std::string& name, const std::string& role, const Command& command);

// Forwards complete lines with the child's name in front (with flush, the last one unended too).
void Drain(Child& c, bool flush);

// Reads what the worker said on its status pipe so far; closes it at its end.
void ReadStatus(Child& c);

// A wait status in words: "exited with status 1", "was killed by signal 9 (Killed)".
std::string Describe(int status);

// Not an exit 0.
bool Failed(int status);

// SIGINT and SIGTERM are caught (counted, the last one kept); SIGPIPE is ignored.
void CatchStopSignals();
// The last SIGINT or SIGTERM caught (0: none); the launcher exits 128 + it.
int StopSignal();
// How many came.
int StopSignalsCaught();

}  // namespace launch
}  // namespace pushpull
