#include "deploy/launch/job.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/daemon/daemon_flags.h"

namespace pushpull {
namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Job::Job(JobOptions options) : o_(std::move(options)) {}

Job::~Job() {
  if (dir_.empty()) return;
  unlink(endpoint_file_.c_str());
  unlink(verdict_file_.c_str());
  rmdir(dir_.c_str());
}

int Job::Run() {
  if (!Start()) return exit_code_;
  Supervise();
  return Finish();
}

// ---- Start: the scheduler, then the servers and the workers.

bool Job::Start() {
  char tmpl[] = "/tmp/pushpull-launch-XXXXXX";
  if (!mkdtemp(tmpl)) {
    perror("mkdtemp");
    exit_code_ = 1;
    return false;
  }
  dir_ = tmpl;
  endpoint_file_ = dir_ + "/scheduler";
  verdict_file_ = dir_ + "/verdict";
  if (!StartScheduler()) return false;
  for (int s = 0; s < o_.servers; ++s) {
    children_.push_back(Spawn("server " + std::to_string(s), "server", ServerCommand(o_, scheduler_, s)));
    children_.back().rank = s;
  }
  for (int w = 0; w < o_.workers; ++w) {
    children_.push_back(Spawn("worker " + std::to_string(w), "worker", WorkerCommand(o_, scheduler_, w)));
    children_.back().rank = w;
  }
  for (const Child& c : children_) {
    if (c.pid >= 0) continue;
    Say("cannot start " + c.name + " (fork failed); stopping the job");
    for (const Child& o : children_)
      if (o.pid >= 0) kill(o.pid, SIGKILL);
    for (const Child& o : children_)
      if (o.pid >= 0) waitpid(o.pid, nullptr, 0);
    exit_code_ = 1;
    return false;
  }
  reporter_.Connect(scheduler_);
  return true;
}

bool Job::StartScheduler() {
  children_.push_back(Spawn("scheduler", "scheduler", SchedulerCommand(o_, endpoint_file_, verdict_file_)));
  Child& scheduler = children_[0];
  if (scheduler.pid < 0) {
    Say("cannot start the scheduler (fork failed)");
    exit_code_ = 1;
    return false;
  }
  // The scheduler picks its port; wait for it to say which.
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (scheduler_.empty()) {
    std::ifstream f(endpoint_file_);
    std::getline(f, scheduler_);
    if (!scheduler_.empty()) break;
    Drain(scheduler, false);
    int st;
    const bool exited = waitpid(scheduler.pid, &st, WNOHANG) == scheduler.pid;
    if (exited || StopSignal() || Clock::now() > until) {
      Drain(scheduler, true);
      Say(exited ? "the scheduler exited before it listened (its error is above)"
                 : "the scheduler did not start (no address within 30 s)");
      if (!exited) {
        kill(scheduler.pid, SIGKILL);
        waitpid(scheduler.pid, &st, 0);
      }
      const Verdict v = ReadVerdict(verdict_file_);
      if (StopSignal()) {
        exit_code_ = 128 + StopSignal();
        return false;
      }
      exit_code_ = exited && WIFEXITED(st) && WEXITSTATUS(st) != 0 ? WEXITSTATUS(st) : 1;  // 2: bad flags
      Say("job failed (exit " + std::to_string(exit_code_) + "): " +
          (v.code > 0 ? v.cause
           : exited   ? "the scheduler (pid " + std::to_string(scheduler.pid) + ") " + Describe(st)
                      : std::string("the scheduler did not start")));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  unlink(endpoint_file_.c_str());
  Say("scheduler at " + scheduler_);
  return true;
}

// ---- Supervise: every child's exit, the scheduler's verdict, the deadlines.

void Job::Supervise() {
  while (true) {
    std::vector<pollfd> pfds;
    for (Child& c : children_)
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    poll(pfds.data(), pfds.size(), 100);
    for (Child& c : children_) Drain(c, false);
    if (StopSignalsCaught() != signals_seen_) {
      signals_seen_ = StopSignalsCaught();
      if (!stopping_) {
        StopAll(StopSignal() == SIGTERM ? "terminated" : "interrupted", 128 + StopSignal());
      } else {  // already stopping (a failure, or a signal before): whoever interrupts wants it over now
        Say("interrupted while stopping; killing what is left now");
        kill_at_ = Clock::now();
      }
    }
    bool all_exited = true;
    for (Child& c : children_) {
      if (c.restart_pending) {  // a worker in a dead one's place
        all_exited = false;
        Replace(c);
        continue;
      }
      if (c.exited) continue;
      int st;
      if (waitpid(c.pid, &st, WNOHANG) != c.pid) {
        all_exited = false;
        continue;
      }
      OnExit(c, st);
    }
    if (all_exited) break;
    CheckDeadlines();
  }
}

void Job::OnExit(Child& c, int st) {
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
  if (c.role == "worker" && !stopping_ && !job_finished_ && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
      c.said.find("finished") == std::string::npos) {
    how = "exited 0 but never finished (no successful Client::Finish())";
    st = W_EXITCODE(1, 0);
  }
  c.status = st;
  const bool failed = Failed(st);
  if (stopping_ && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) {  // (ours, before it could heed it: just started)
    Say(c.name + " (" + pid + ") stopped by the launcher's SIGTERM");
    return;
  }
  const std::string what = pid + " " + how;  // (as the scheduler is told it)
  if (failed || c.role == "scheduler") Say(c.name + " (" + pid + ") " + how);
  if (c.role == "scheduler") {
    OnSchedulerExit(c, st, how);
    return;
  }
  if (stopping_ || !failed) return;
  if (job_finished_) {
    // The job finished; a server that then missed the scheduler's last word and gave up on it,
    // or a process killed from outside meanwhile, is no failure of the job (and nothing to
    // restart: a worker killed then would otherwise restart a finished job). A worker's own
    // exit status after it finished counts (a program that checks its result after Finish).
    if (c.role == "server" || WIFSIGNALED(st))
      Say(c.name + " ended after the job finished; the job is not failed for it");
    else if (cause_.empty())
      cause_ = c.name + " (" + what + ") after the job finished";
    return;
  }
  OnDeath(c, st, what);
}

void Job::OnSchedulerExit(Child& c, int st, const std::string& how) {
  // Its verdict names the first cause, with that cause's exit code.
  const Verdict v = ReadVerdict(verdict_file_);
  if (!Failed(st)) {
    job_finished_ = true;
    death_.clear();  // (it finished all the same)
    kill_at_ = Clock::now() + std::chrono::milliseconds(o_.grace_ms);
  } else if (v.code > 0) {
    if (!stopping_) {  // (the scheduler's word over the launcher's own guess)
      exit_code_ = v.code;
      cause_ = v.cause;
    }
    StopAll("the scheduler ended the job: " + v.cause, v.code);
  } else {
    StopAll("the scheduler (pid " + std::to_string(c.pid) + ") " + how + "; the job cannot go on without it", 1);
  }
}

void Job::OnDeath(Child& c, int st, const std::string& what) {
  const bool died = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 1);  // not a setup error, 2
  if (c.role == "worker" && died && FLAGS_on_worker_death == "continue") {
    // The scheduler goes on without it the same way, and ends the job itself if that was the
    // last worker or a server died.
    reporter_.Report(c, what, CodeOfExit(st), false);
    Say(c.name + " died; the job goes on without it (--on_worker_death=continue)");
    c.tolerated = true;  // (not the job's failure when it finishes)
    return;
  }
  if (c.role == "worker" && died && FLAGS_on_worker_death == "wait" && death_.empty() &&
      worker_restarts_ < o_.max_worker_restarts) {
    PlanReplacement(c, st, what);
    return;
  }
  reporter_.Report(c, what, CodeOfExit(st), false);
  if (!death_.empty()) {
    // Its calls failed with the job the first death ends: not a death of its own to blame.
    Say(c.name + " stopped after " + death_ + " died");
    return;
  }
  death_ = c.name;
  cause_ = c.name + " (" + what + ")";
  exit_code_ = ExitCodeOf(CodeOfExit(st));  // (until the scheduler's verdict says)
  if (WEXITSTATUS(st) == 127 && WIFEXITED(st)) exit_code_ = 127;
  // The scheduler ends the job at its next pass; a heartbeat timeout and more is a scheduler
  // that did not hear (the report lost with its connection).
  death_until_ = Clock::now() + std::chrono::milliseconds(int64_t(FLAGS_heartbeat_timeout_ms) + 2000);
  Say("told the scheduler; waiting up to " + std::to_string((FLAGS_heartbeat_timeout_ms + 2000) / 1000) +
      " s for its verdict");
}

void Job::CheckDeadlines() {
  if (!death_.empty() && !stopping_ && !job_finished_ && Clock::now() > death_until_) {
    const std::string why = cause_;
    StopAll(death_ + " failed (the scheduler did not end the job)", exit_code_ == 0 ? 1 : exit_code_);
    cause_ = why;
  }
  KillOverdue();
}

// ---- Replace: a new worker in a dead one's place (--on_worker_death=wait).

void Job::PlanReplacement(Child& c, int st, const std::string& what) {
  // Its rank waits for a new worker (the scheduler's --on_worker_death=wait): one is
  // started with the same flags, --rank among them, once the dead one can be declared dead.
  // (At most half the scheduler's --replacement_timeout_s: a longer --restart_delay_ms, fit for
  // whole-job restarts, would start every replacement after the job had given up on it.)
  reporter_.Report(c, what, CodeOfExit(st), true);
  const int64_t delay_ms =
      std::min<int64_t>({int64_t(o_.restart_delay_ms) << std::min(worker_restarts_, 16),
                         std::max(60000, o_.restart_delay_ms), int64_t(FLAGS_replacement_timeout_s) * 500});
  ++worker_restarts_;
  Say(c.name + " died; starting a new one in its place in " + std::to_string(delay_ms) + " ms (" +
      std::to_string(worker_restarts_) + " of " + std::to_string(o_.max_worker_restarts) + ", --on_worker_death=wait)");
  c.restart_pending = true;
  c.restart_at = Clock::now() + std::chrono::milliseconds(delay_ms);
}

void Job::Replace(Child& c) {
  if (stopping_) {
    c.restart_pending = false;
    return;
  }
  if (Clock::now() < c.restart_at) return;
  Child fresh = Spawn(c.name, c.role, c.command);
  if (fresh.pid < 0) {
    c.restart_pending = false;
    StopAll("cannot start " + c.name + " again (fork failed)", 1);
    return;
  }
  fresh.rank = c.rank;
  c = std::move(fresh);
}

// ---- Finish: stopping, the grace period and its kill, and the job's exit status.

void Job::StopAll(const std::string& why, int code) {
  if (stopping_) return;
  stopping_ = true;
  if (exit_code_ == 0) exit_code_ = code;
  if (cause_.empty()) cause_ = why;
  Say(why + "; stopping every process");
  for (Child& c : children_)
    if (!c.exited) kill(c.pid, SIGTERM);
  kill_at_ = Clock::now() + std::chrono::milliseconds(o_.grace_ms);
}

void Job::KillOverdue() {
  // After the scheduler ended the job (or we are stopping), children get a grace period.
  const bool sched_done = children_[0].exited;
  if ((stopping_ || sched_done) && kill_at_.time_since_epoch().count() != 0 && Clock::now() > kill_at_) {
    for (Child& c : children_)
      if (!c.exited) {
        Say(c.name + " did not exit in time; killing it");
        kill(c.pid, SIGKILL);
      }
    stopping_ = true;  // what dies now, dies of this kill: not a failure of the job's own
    kill_at_ = Clock::now() + std::chrono::hours(1);
  }
}

int Job::Finish() {
  if (exit_code_ == 0) {
    for (const Child& c : children_) {
      // After the scheduler finished the job, only the workers' own exit codes count (3: a missed
      // target), not servers nor what the grace period's kill ended.
      if (job_finished_ && (c.role == "server" || WIFSIGNALED(c.status))) continue;
      if (Failed(c.status) && !c.tolerated) {
        exit_code_ = c.role == "worker" && WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 1;
        if (cause_.empty()) cause_ = c.name + " (pid " + std::to_string(c.pid) + ") " + Describe(c.status);
        break;
      }
    }
  }
  // A restart may get past a death (exit 1), not bad flags, a missed target, a diverged model, nor
  // an interrupt.
  crashed_ = exit_code_ == 1;
  Say(exit_code_ == 0 ? "job succeeded" : "job failed (exit " + std::to_string(exit_code_) + "): " + cause_);
  return exit_code_;
}

// ---- Restarts of the whole job.

int RunJobs(JobOptions options, int max_restarts, const std::string& checkpoint_dir) {
  // A restart resumes from a checkpoint this launcher's job wrote (LATEST changed since it
  // started), not from one an earlier job left in the directory; else as the first run did.
  auto latest = [&checkpoint_dir] {  // what LATEST names, and when it was written ("" when there is none)
    const std::string path = checkpoint_dir + "/LATEST";
    std::ifstream f(path);
    std::string name;
    std::getline(f, name);
    std::error_code ec;
    const auto when = std::filesystem::last_write_time(path, ec);
    return name.empty() || ec ? std::string() : name + "@" + std::to_string(when.time_since_epoch().count());
  };
  const std::string latest_at_start = checkpoint_dir.empty() ? "" : latest();
  for (int attempt = 0;; ++attempt) {
    int code;
    bool crashed;
    {
      Job job(options);
      code = job.Run();
      crashed = job.crashed();
    }
    if (code == 0 || !crashed || attempt >= max_restarts) return code;
    if (StopSignal()) return 128 + StopSignal();
    const std::string now = checkpoint_dir.empty() ? "" : latest();
    if (!now.empty() && now != latest_at_start) options.restore_from = checkpoint_dir;
    const int64_t delay_ms = std::min<int64_t>(int64_t(options.restart_delay_ms) << std::min(attempt, 16),
                                               std::max(60000, options.restart_delay_ms));
    Say("restart " + std::to_string(attempt + 1) + " of " + std::to_string(max_restarts) + ": " +
        (options.restore_from.empty() ? "from the start (no checkpoint of this job)"
                                      : "from the newest checkpoint in " + options.restore_from) +
        ", starting in " + std::to_string(delay_ms) + " ms");
    for (const auto until = Clock::now() + std::chrono::milliseconds(delay_ms); !StopSignal() && Clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (StopSignal()) {
      Say("interrupted; not restarting");
      return 128 + StopSignal();
    }
  }
}

}  // namespace launch
}  // namespace pushpull
