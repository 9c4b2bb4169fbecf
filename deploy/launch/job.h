// One run of a job on this machine, as pushpull-launch runs it: the scheduler on a free port, the
// servers and the workers (Start); then every child watched until all have exited (Supervise):
// their output forwarded, their exits judged, the scheduler told of each death and its verdict
// awaited, a dead worker replaced under --on_worker_death=wait (Replace), every child stopped on a
// failure or a signal and killed after --grace_ms; and the job's exit status with its first cause
// (Finish). RunJobs runs it again after a crash, up to --max_restarts times.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "deploy/launch/commands.h"
#include "deploy/launch/process.h"
#include "deploy/launch/verdict.h"

namespace pushpull {
namespace launch {

class Job {
 public:
  explicit Job(JobOptions options);
  ~Job();  // removes the job's directory (the scheduler's address and verdict files)
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Starts the scheduler, waits for its address, then starts the servers and the workers. False:
  // the job did not start (said why; exit_code() is the launcher's).
  bool Start();
  // Until every child has exited: forwards their output, judges each exit, starts replacements,
  // stops the job on a failure or a signal and kills what outlives the grace period.
  void Supervise();
  // The job's exit status, said with its first cause: the scheduler's verdict, else the first
  // failure the launcher saw; sets crashed().
  int Finish();
  // Start, Supervise, Finish.
  int Run();

  int exit_code() const { return exit_code_; }
  // Before any stop of ours, a process died (a signal not sent here), exited 1, or the scheduler
  // ended the job (a node declared dead): what a restart may get past.
  bool crashed() const { return crashed_; }

 private:
  // Start's: the scheduler, and its address once it listens. False: it did not start.
  bool StartScheduler();
  // A child that exited with `status`.
  void OnExit(Child& c, int status);
  void OnSchedulerExit(Child& c, int status, const std::string& how);
  // A server's or a worker's failure, before the job finished: tolerated, replaced, or the job's death.
  void OnDeath(Child& c, int status, const std::string& what);
  // --on_worker_death=wait: plans a new worker in the dead one's place, with the same command,
  // once the dead one can be declared dead; Replace starts it when that time has come.
  void PlanReplacement(Child& c, int status, const std::string& what);
  void Replace(Child& c);
  // Finishing: every child told to stop (SIGTERM; once), killed when the grace period is over.
  void StopAll(const std::string& why, int code);
  void CheckDeadlines();
  void KillOverdue();

  JobOptions o_;
  std::string dir_;  // the job's own directory ("": not made)
  std::string endpoint_file_, verdict_file_;
  std::string scheduler_;        // its address
  std::vector<Child> children_;  // the scheduler first
  ExitReporter reporter_;

  int exit_code_ = 0;
  std::string cause_;        // the first real cause of the job's failure, for the last line
  int worker_restarts_ = 0;  // --on_worker_death=wait
  bool stopping_ = false;
  bool job_finished_ = false;  // the scheduler exited 0: it ended the job as finished
  bool crashed_ = false;
  int signals_seen_ = 0;
  std::chrono::steady_clock::time_point kill_at_;
  // A process died and the scheduler was told: it ends the job (or goes on, by its policy) naming
  // the first death. Until then the others are left running: stopped now, each would tell the job
  // it stopped on a signal, and the job's end could blame one of them.
  std::string death_;
  std::chrono::steady_clock::time_point death_until_;
};

// The job, run again after a crash (Job::crashed()) up to max_restarts times, --restart_delay_ms
// apart, doubling: from the newest checkpoint this launcher's job wrote in checkpoint_dir when
// there is one. The last run's exit status (128 + N on signal N).
int RunJobs(JobOptions options, int max_restarts, const std::string& checkpoint_dir);

}  // namespace launch
}  // namespace pushpull
