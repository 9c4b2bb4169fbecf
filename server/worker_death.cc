#include "server/worker_death.h"

#include <limits>

#include "common/log.h"
#include "common/time.h"

namespace pushpull::server {

WorkerDeaths::WorkerDeaths(ServerContext* ctx, ControlChannel* control, std::vector<WorkerState>* workers,
                           MinClock* min_clock, Tables* tables, UpdateThreads* updates,
                           const CheckpointWriter* checkpoint)
    : ctx_(ctx),
      control_(control),
      workers_(workers),
      min_clock_(min_clock),
      tables_(tables),
      updates_(updates),
      checkpoint_(checkpoint) {}

void WorkerDeaths::OnMembership() {
  const Membership& mem = control_->membership();
  // An ending job releases nothing: parked pulls are answered with the job's end instead of being
  // served because the dead worker that ended it stopped being waited for.
  if (mem.job_state != Membership::kRunning) return;
  consistency::ClockVector& clocks = min_clock_->clocks();
  bool report = false;
  for (int w = 0; w < clocks.size() && w < static_cast<int>(mem.worker_alive.size()); ++w) {
    if (!clocks.alive(w)) continue;
    WorkerState& worker = (*workers_)[w];
    if (mem.worker_alive[w] == Membership::kWorkerDying) {
      if (mem.version <= worker.hello_version) continue;  // about a worker replaced since
      // Its clock stays put (its requests are refused from now on) until the servers agree.
      if (!worker.dying)
        PP_LOG(Warning) << "worker " << w << " declared dead at clock " << clocks.clock(w)
                        << " here; telling the scheduler, which asks every server where its clock is";
      worker.dying = true;
      report = true;
      continue;
    }
    worker.dying = false;
    if (mem.worker_alive[w] != Membership::kWorkerAlive && static_cast<size_t>(w) < mem.worker_last_clock.size())
      RaiseToAgreedClock(w, mem.worker_last_clock[w]);
    if (mem.worker_alive[w] == Membership::kWorkerReplacing) {
      // Told already, or replaced since.
      if (worker.replacing || mem.version <= worker.hello_version) continue;
      PP_LOG(Warning) << "worker " << w << " declared dead at clock " << clocks.clock(w)
                      << "; waiting for the worker that takes its place";
      worker.replacing = true;
      if (!checkpoint_->writing()) DropBspSums(w);
    } else if (!mem.worker_alive[w]) {
      PP_LOG(Warning) << "worker " << w << " declared dead; no longer waiting for it";
      clocks.MarkDead(w);
      if (!checkpoint_->writing()) DropBspSums(w);  // (none are open while one is written)
    } else if (w < static_cast<int>(mem.worker_done.size()) && mem.worker_done[w]) {
      PP_LOG(Info) << "worker " << w << " finished at clock " << clocks.clock(w);
      clocks.MarkDead(w);
    }
  }
  any_dying_ = report;
  if (report) ReportWorkerClocks();
  // Not while a checkpoint is written: released pulls and BSP sums would touch the shards.
  if (!checkpoint_->writing()) min_clock_->Advance();
}

bool WorkerDeaths::OnHello(int w, std::string session, const Header& h) {
  WorkerState& worker = (*workers_)[w];
  if (worker.session == session) return false;
  const consistency::ClockVector& clocks = min_clock_->clocks();
  bool raised = false;
  // The clock the servers agreed the rank's dead worker reached, as the new client heard it
  // from the scheduler: this server may not have heard it yet (nor that the rank is no longer
  // dying). Before anything below reads the clock.
  if (h.row_begin > 0 && h.row_begin <= uint64_t(std::numeric_limits<int64_t>::max()) &&
      RaiseToAgreedClock(w, static_cast<int64_t>(h.row_begin - 1)) && !checkpoint_->writing())
    raised = true;
  worker.dying = false;
  // A new process for this rank after another (a replacement): what the one before left
  // unfinished of its open clock is dropped (BSP sums), and it goes on from this clock.
  if (!worker.session.empty() || worker.replacing) {
    // Pushes of the open clock applied already (by the one before, or redone by an earlier
    // replacement, or still to be redone for one) are the new client's first ones again.
    for (auto& [table, n] : worker.pushed_in_clock) worker.redo[table] += n;
    worker.pushed_in_clock.clear();
    int64_t redo = 0;
    for (auto& [table, n] : worker.redo) redo += n;
    PP_LOG(Warning) << "worker " << w << ": a new client took its place at clock " << clocks.clock(w)
                    << (redo > 0 ? "; its first " + std::to_string(redo) +
                                       " pushes there were applied already and will be answered, not "
                                       "applied again"
                                 : std::string());
    if (!checkpoint_->writing()) DropBspSums(w);
  }
  worker.refused_push = {};  // (the new client's own pushes count)
  worker.session = std::move(session);
  worker.requests = RequestRecord();
  worker.replacing = false;
  worker.hello_clock = clocks.clock(w);
  // (kHello's clock: the membership version its client registered under, which has it alive: a
  // "being replaced" older than that, still on its way here, is not about it.)
  worker.hello_version = h.clock > 0 ? uint64_t(h.clock) : 0;
  return raised;
}

void WorkerDeaths::Tick() {
  if (any_dying_ && NowMs() >= next_clocks_report_ms_) ReportWorkerClocks();
}

void WorkerDeaths::ReportWorkerClocks() {
  const consistency::ClockVector& clocks = min_clock_->clocks();
  Header h;
  h.type = MsgType::kWorkerClocks;
  h.clock = static_cast<int64_t>(control_->membership().version);
  for (int w = 0; w < clocks.size(); ++w) {
    h.worker_clocks.push_back(clocks.clock(w));
    h.worker_settled.push_back((*workers_)[w].settled);
  }
  Status st = control_->Send(std::move(h));
  if (!st.ok()) PP_LOG(Warning) << "telling the scheduler the workers' clocks: " << st.ToString();
  next_clocks_report_ms_ = NowMs() + ctx_->options.control.heartbeat_interval_ms;
}

bool WorkerDeaths::RaiseToAgreedClock(int w, int64_t agreed) {
  consistency::ClockVector& clocks = min_clock_->clocks();
  const int64_t was = clocks.clock(w);
  if (!clocks.Raise(w, agreed)) return false;
  // Its pushes of the clocks passed are whole here (a settled Clock went out only once every
  // earlier push was answered): they count, as on the servers its Clock reached.
  PP_LOG(Warning) << "worker " << w << "'s last Clock() reached other servers and not this one: counting it at clock "
                  << agreed << " (was " << was << ") as they do";
  (*workers_)[w].pushed_in_clock.clear();
  (*workers_)[w].redo.clear();
  return true;
}

// BSP: a worker that died in the middle of a clock may have reached some servers with its pushes
// for it and not others. Every server drops its sums from the clock the worker had not finished
// on, so the clock's mean is over the workers that finished it, alike everywhere (DESIGN.md). A
// finished worker's sums are whole (Finish waits for its pushes) and stay.
void WorkerDeaths::DropBspSums(int w) {
  const int64_t from = min_clock_->clocks().clock(w);
  for (auto& t : tables_->all()) {
    if (!t || t->spec().consistency.model != Consistency::kBsp) continue;
    for (auto& [k, pushed] : t->bsp_contributors) {
      if (k < from || static_cast<size_t>(w) >= pushed.size() || !pushed[w]) continue;
      pushed[w] = 0;
      PP_LOG(Warning) << "table '" << t->spec().name << "': dropping dead worker " << w << "'s pushes for clock " << k;
      auto* r = new Request;
      r->op = Request::kDropWorker;
      r->shard = t.get();
      r->clock = k;
      r->worker = w;
      updates_->Dispatch(r);  // behind its pushes in every stripe's queue, before the clock's apply
    }
  }
}

}  // namespace pushpull::server
