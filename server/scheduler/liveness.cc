#include "server/scheduler/liveness.h"

#include <algorithm>
#include <limits>

#include "common/log.h"

namespace pushpull::scheduler {

void Liveness::ForgiveStall(int64_t now, int64_t stalled) {
  for (auto& [id, n] : state_.nodes) n.last_seen_ms = std::min(now, n.last_seen_ms + stalled);
  // (The servers' word on a dying worker's clock may be in meanwhile.)
  for (auto& [rank, d] : dying_) d.deadline = Deadline::In(d.deadline.at_ms() + stalled - now);
  if (stalled > 1000) PP_LOG(Warning) << "this loop stalled for " << stalled << " ms; not held against any node";
}

void Liveness::Check(int64_t now) {
  Membership& membership = state_.membership;
  bool changed = false;
  // Judged in the order they died (a silent node when it was last heard): the first death is the
  // job's cause. Others stop because of it (their calls fail, a launcher stops them), and may be
  // heard of first: a killed worker is only silent, while the one its death stalls says why it stops.
  std::vector<Node*> gone;
  for (auto& [id, n] : state_.nodes) {
    const bool left = !n.left.ok();
    if (!n.alive || n.done || (!left && now - n.last_seen_ms <= options_.heartbeat_timeout_ms)) continue;
    gone.push_back(&n);
  }
  std::stable_sort(gone.begin(), gone.end(), [](const Node* a, const Node* b) {
    return (a->left.ok() ? a->last_seen_ms : a->left_ms) < (b->left.ok() ? b->last_seen_ms : b->left_ms);
  });
  for (Node* node : gone) {
    Node& n = *node;
    const bool left = !n.left.ok();
    n.alive = false;
    changed = true;
    std::string why = n.exited ? NodeName(n) + " died: " + n.left.message()
                      : left   ? NodeName(n) + " stopped: " + n.left.ToString()
                               : NodeName(n) + " sent no heartbeat for " + std::to_string(now - n.last_seen_ms) +
                                   " ms (timeout " + std::to_string(options_.heartbeat_timeout_ms) + " ms)";
    n.death = why;
    PP_LOG(Error) << why << ": declared dead";
    if (n.role == Role::kServer) {
      membership.server_alive[n.rank] = 0;
      // A server's setup (its flags, a checkpoint it cannot restore from) fails the same way again:
      // pushpull-scheduler exits 2 for it, not restarted.
      if (IsSetupError(n.left.code()))
        state_.end_code = n.left.code();
      else if (n.left.code() == Code::kCorruption)
        state_.end_code = Code::kInvalidArgument;
      events_.End(Membership::kAborted, why + "; a job cannot go on without a server");
      return;
    }
    if (IsSetupError(n.left.code()) || n.left.code() == Code::kDiverged || n.left.code() == Code::kTargetMissed) {
      // A worker's bad flags or setup (a missing file, a full table), a diverged model or a missed
      // target end the job whatever --on_worker_death: a worker in its place, started with the
      // same flags, or the others, would stop the same way. Run() says so in its code, which
      // pushpull-scheduler exits with (ExitCodeOf: 2, 4 or 3).
      membership.worker_alive[n.rank] = Membership::kWorkerDead;
      state_.end_code = n.left.code();
      events_.End(Membership::kAborted, IsSetupError(n.left.code())
                                            ? why + " (a setup error: the job ends whatever --on_worker_death)"
                                            : why);
      return;
    }
    // Its barrier wait and its ask for a checkpoint go with it: a replacement in its place is
    // another worker, which asks for itself (it catches up on the checkpoint due at the clock it
    // starts at: apps/app.cc).
    events_.WorkerGone(n.rank);
    if (options_.wait_for_replacement || options_.continue_on_worker_death) {
      // Dying first: the servers say where its clock is (SettleDying).
      membership.worker_alive[n.rank] = Membership::kWorkerDying;
      dying_[n.rank] = Dying{membership.version + 1, Deadline::In(options_.heartbeat_timeout_ms)};
      continue;
    }
    membership.worker_alive[n.rank] = Membership::kWorkerDead;
    events_.End(Membership::kAborted, left ? why
                                           : why +
                                                 " (run with --on_worker_death=continue to go on without it, or "
                                                 "=wait to wait for a replacement)");
    return;
  }
  for (auto& [rank, deadline] : replacing_) {
    if (!deadline.Expired()) continue;
    events_.End(Membership::kAborted, "worker " + std::to_string(rank) + " died and no worker took its place within " +
                                          std::to_string(options_.replacement_timeout_ms) +
                                          " ms (--replacement_timeout_s)");
    return;
  }
  if (changed) {
    if (LiveWorkers() == 0 && !options_.wait_for_replacement) {
      events_.End(Membership::kAborted, "every worker has died");
      return;
    }
    AnnounceWorkerDeaths("worker died; asking the servers where its clock is");
  }
  SettleDying(/*decide_without_missing=*/true);
}

int Liveness::LiveWorkers() const {
  int live = 0;
  for (const Node* w : state_.workers) live += w->alive;
  return live;
}

void Liveness::AnnounceWorkerDeaths(const std::string& reason) {
  state_.membership.version++;
  state_.membership.reason = reason;
  state_.Broadcast();
  events_.WorkersChanged();
}

void Liveness::HandleWorkerClocks(const Node& server, const Header& h) {
  ClocksReport& r = clocks_reports_[server.rank];
  const uint64_t version = h.clock > 0 ? uint64_t(h.clock) : 0;
  if (version < r.version) return;  // (an older one, overtaken)
  r.version = version;
  r.clocks = h.worker_clocks;
  r.settled = h.worker_settled;
  SettleDying(/*decide_without_missing=*/false);
}

void Liveness::SettleDying(bool decide_without_missing) {
  Membership& membership = state_.membership;
  if (dying_.empty() || membership.job_state != Membership::kRunning) return;
  bool changed = false;
  for (auto it = dying_.begin(); it != dying_.end();) {
    const int w = it->first;
    const Dying& d = it->second;
    std::string missing;
    int64_t highest = std::numeric_limits<int64_t>::min(), lowest = std::numeric_limits<int64_t>::max();
    bool settled = false;
    for (Node* s : state_.servers) {
      if (!s->alive) continue;
      auto r = clocks_reports_.find(s->rank);
      if (r == clocks_reports_.end() || r->second.version < d.version ||
          static_cast<size_t>(w) >= r->second.clocks.size()) {
        missing += (missing.empty() ? "" : ", ") + NodeName(*s);
        continue;
      }
      const int64_t c = r->second.clocks[w];
      const bool s_settled = r->second.settled[w] != 0;
      lowest = std::min(lowest, c);
      if (c > highest)
        highest = c, settled = s_settled;
      else if (c == highest)
        settled = settled || s_settled;
    }
    if (!missing.empty() && (!decide_without_missing || !d.deadline.Expired())) {
      ++it;
      continue;
    }
    if (!missing.empty())
      PP_LOG(Warning) << "worker " << w << " died: no word from " << missing << " on where its clock is within "
                      << options_.heartbeat_timeout_ms << " ms; deciding without "
                      << (missing.find(',') == std::string::npos ? "it" : "them");
    int64_t agreed = -1;
    if (highest > lowest && settled) {
      // Its last Clock() went out once all it had pushed was answered: the servers it did not
      // reach hold every push of the clocks it closed, and count them as the others do.
      agreed = highest;
      PP_LOG(Warning) << "worker " << w << " died between its Clock() messages: it reached clock " << highest
                      << " on some servers and " << lowest << " on others; every server counts it at " << highest;
    } else if (highest > lowest) {
      PP_LOG(Warning) << "worker " << w << " died between its Clock() messages (clock " << highest
                      << " on some servers, " << lowest
                      << " on others), which carried no push to a BSP table: each server keeps its own";
    }
    membership.worker_last_clock[w] = agreed;
    if (options_.wait_for_replacement) {
      membership.worker_alive[w] = Membership::kWorkerReplacing;
      replacing_.insert_or_assign(w, Deadline::In(options_.replacement_timeout_ms));
      PP_LOG(Warning) << "waiting up to " << options_.replacement_timeout_ms << " ms for a worker to take rank " << w
                      << " (pushpull-worker --rank=" << w << "); the others wait for its clock";
    } else {
      membership.worker_alive[w] = Membership::kWorkerDead;
    }
    it = dying_.erase(it);
    changed = true;
  }
  if (!changed) return;
  AnnounceWorkerDeaths(options_.wait_for_replacement
                           ? "worker died; waiting for its replacement"
                           : "worker died; continuing with " + Count(LiveWorkers(), "worker"));
}

int Liveness::FillVacancy(int asked) {
  const int rank = replacing_.count(asked) ? asked : replacing_.begin()->first;
  replacing_.erase(rank);
  return rank;
}

void Liveness::HandleDone(Node& n, const Header& h) {
  const Waiter waiter{n.identity, h.request_id};
  if (!n.done && h.status != Code::kOk) {
    // A worker stopping early (Client::Leave), or a server stopped before the job ended:
    // declared dead at the next Check() (a worker under --on_worker_death), for the reason it
    // gives rather than a heartbeat timeout later. (Asked again: answered again.)
    if (n.alive && n.left.ok()) {
      n.left = h.status_obj();
      n.left_ms = NowMs();
      PP_LOG(Error) << NodeName(n) << " is stopping: " << n.left.ToString();
    }
    state_.ReplyTo(waiter, MsgType::kDoneReply, Status::OK());
  } else if (n.role == Role::kWorker && !n.done) {
    n.done = true;
    PP_LOG(Info) << "worker " << n.rank << " finished";
    state_.membership.worker_done[n.rank] = 1;
    state_.membership.version++;
    events_.WorkersChanged();
    if (state_.membership.job_state == Membership::kRunning) {
      state_.Broadcast();
    } else {
      // This finish ended the job: the end goes out first (the worker, told the job finished
      // with its finish in it, heartbeats that it holds the end and completes Finish()), its
      // answer after; both may be lost with a connection that drops now. The worker counts
      // as told once that heartbeat comes, or at the end's deadline; until then it is
      // answered what it asks again.
      n.end_heard = true;
      n.told_end = false;
    }
    state_.ReplyTo(waiter, MsgType::kDoneReply, Status::OK());
  } else if (n.role == Role::kWorker) {
    // Again (a retried Finish whose first answer was lost): done already.
    state_.ReplyTo(waiter, MsgType::kDoneReply, Status::OK());
  }
}

void Liveness::HandleNodeExited(const Header& h) {
  if (state_.membership.job_state != Membership::kRunning) return;
  const bool server = h.sender_role == Role::kServer;
  const std::string name = std::string(server ? "server " : "worker ") + std::to_string(h.sender_rank);
  // The launcher's code for what it saw (an exit status of 2, 3 or 4 keeps its meaning).
  const Status why(h.status == Code::kOk ? Code::kAborted : h.status, h.error);
  if (!state_.registered) {
    if (h.clock == 1) {
      PP_LOG(Warning) << name << " " << why.message() << " before the job started; the launcher starts another";
      return;
    }
    if (ExitCodeOf(why.code()) != 1) state_.end_code = why.code();
    events_.End(Membership::kAborted, name + " died before the job started: " + why.message());
    return;
  }
  const std::vector<Node*>& nodes = server ? state_.servers : state_.workers;
  if (h.sender_rank < 0 || static_cast<size_t>(h.sender_rank) >= nodes.size() || h.sender_role == Role::kScheduler) {
    PP_LOG(Warning) << "ignoring a report that " << name << " exited: the job has no such node";
    return;
  }
  Node& n = *nodes[h.sender_rank];
  // Declared dead already, finished, or stopping for a reason it gave: that says more.
  if (!n.alive || n.done || !n.left.ok()) return;
  n.left = why;
  n.left_ms = NowMs();
  n.exited = true;
  PP_LOG(Error) << NodeName(n) << " died: " << why.message();
}

void Liveness::AnswerDeadNode(const Node& n) {
  // Declared dead already, yet it speaks (silent past the timeout: a paused process, a network
  // partition that healed): tell it so it stops. A worker in a running job hears it as a
  // registration the scheduler no longer holds, which ends the node (ControlChannel), with its
  // calls: the membership alone does not say which node it is (under --on_worker_death=wait its
  // rank may be alive again, another worker's), and its requests are never answered (a Barrier()
  // it is in would wait out its whole deadline).
  if (n.role == Role::kWorker && state_.membership.job_state == Membership::kRunning) {
    state_.ReplyTo(Waiter{n.identity, 0}, MsgType::kRegisterReply,
                   Status::Aborted("the scheduler declared this worker dead (" + n.death +
                                   ") and the job went on without it: it must stop"));
    return;
  }
  state_.SendMembership(n.identity);
}

}  // namespace pushpull::scheduler
