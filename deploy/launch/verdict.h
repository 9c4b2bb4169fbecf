// How a job ended, between pushpull-launch and its scheduler: the scheduler's word (its
// --verdict_file, ReadVerdict), what a child's exit means (CodeOfExit), and the exits the launcher
// saw, told to the scheduler (ExitReporter).
#pragma once

#include <memory>
#include <string>

#include "common/transport.h"
#include "deploy/launch/process.h"
#include "pushpull/status.h"

namespace pushpull {
namespace launch {

// The scheduler's word on how the job ended (its --verdict_file): exit status and first cause.
struct Verdict {
  int code = -1;  // -1: none written (the scheduler was killed, or is not done)
  std::string cause;
};
Verdict ReadVerdict(const std::string& path);

// What an exit status means for the job, as the binaries' own exit codes say it (ExitCodeOf).
Code CodeOfExit(int status);

// Tells the scheduler which process it counts exited, and of what (kNodeExited): the job's
// verdict then names it at once, not a heartbeat timeout later, nor a process stopped because
// of it. Best effort: a scheduler that is gone is the launcher's own verdict.
class ExitReporter {
 public:
  void Connect(const std::string& scheduler);
  // `replaced`: a new worker is started in its place (--on_worker_death=wait).
  void Report(const Child& c, const std::string& what, Code code, bool replaced);

 private:
  std::shared_ptr<Transport> transport_ = NewZmqTransport();
  std::unique_ptr<Socket> sock_;
};

}  // namespace launch
}  // namespace pushpull
