#include "server/scheduler/metrics.h"

#include <utility>

namespace pushpull::scheduler {

Result<std::unique_ptr<Metrics>> Metrics::Start(const std::string& host, int port, int num_servers, int num_workers) {
  std::unique_ptr<Metrics> metrics(new Metrics(num_servers, num_workers));
  Metrics* m = metrics.get();
  PP_ASSIGN_OR_RETURN(metrics->endpoint_, MetricsEndpoint::Start(host, port, [m] { return m->Render(); }));
  return Result<std::unique_ptr<Metrics>>(std::move(metrics));
}

void Metrics::Publish(Snapshot* s) {
  MutexLock l(&mu_);
  std::swap(snapshot_, *s);
}

std::string Metrics::Render() const {
  Snapshot s;
  {
    MutexLock l(&mu_);
    s = snapshot_;
  }
  const Membership& mem = s.membership;
  MetricsText m;
  const char* states[] = {"running", "finished", "aborted"};
  for (int i = 0; i < 3; ++i)
    m.Gauge("pushpull_job_state", "The job's state: 1 for the state it is in.", mem.job_state == i,
            {{"state", states[i]}});
  m.Gauge("pushpull_job_registered", "1 once every server and worker registered and the job started.", s.registered);
  if (!s.registered) {
    m.Gauge("pushpull_job_nodes_registered", "Before the job starts: the nodes registered so far, by role.",
            double(s.servers_registered), {{"role", "server"}});
    m.Gauge("pushpull_job_nodes_registered", "", double(s.workers_registered), {{"role", "worker"}});
  }
  // (Before the job starts, no worker is in any state.)
  size_t live = 0, dying = 0, replacing = 0, dead = 0, finished = 0;
  for (size_t w = 0; s.registered && w < mem.worker_alive.size(); ++w) {
    if (w < mem.worker_done.size() && mem.worker_done[w])
      ++finished;
    else if (mem.worker_alive[w] == Membership::kWorkerAlive)
      ++live;
    else if (mem.worker_alive[w] == Membership::kWorkerDying)
      ++dying;
    else if (mem.worker_alive[w] == Membership::kWorkerReplacing)
      ++replacing;
    else
      ++dead;
  }
  const std::pair<const char*, size_t> workers[] = {
      {"live", live}, {"dying", dying}, {"awaiting_replacement", replacing}, {"dead", dead}, {"finished", finished}};
  for (auto [state, n] : workers)
    m.Gauge("pushpull_job_workers", "Workers by state (live, dying, awaiting_replacement, dead, finished).", double(n),
            {{"state", state}});
  m.Gauge("pushpull_job_workers_expected", "--num_workers.", num_workers_);
  size_t servers_alive = 0;
  for (size_t i = 0; s.registered && i < mem.server_alive.size(); ++i) servers_alive += mem.server_alive[i] != 0;
  m.Gauge("pushpull_job_servers_alive", "Servers alive.", double(servers_alive));
  m.Gauge("pushpull_job_servers_expected", "--num_servers.", num_servers_);
  m.Gauge("pushpull_job_membership_version", "Changes with every death, replacement and finish.", double(mem.version));
  m.Gauge("pushpull_job_tables", "Tables created.", double(s.tables));
  m.Gauge("pushpull_job_barrier_waiting", "Workers waiting in a barrier now.", double(s.barrier_waiting));
  m.Counter("pushpull_job_checkpoints_total", "Checkpoints committed by this scheduler.", double(s.checkpoints));
  m.Gauge("pushpull_job_checkpoint_clock", "The clock of the newest committed checkpoint (-1: none).",
          double(s.committed_clock));
  return m.str();
}

}  // namespace pushpull::scheduler
