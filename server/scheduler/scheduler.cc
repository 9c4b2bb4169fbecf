// The scheduler (server/scheduler/scheduler.h) composed of its parts: the shared job state and messaging
// (scheduler_state.h), registration (scheduler_registration.h), liveness and membership
// (scheduler_liveness.h), table creation (scheduler_tables.h), checkpoint coordination
// (scheduler_checkpoints.h) and /metrics (scheduler_metrics.h). Here: the one socket, the loop
// that reads it and hands each message to its part, barriers, and the job's end.
//
// Threading: Run() is the only thread touching the job's state and the socket (Create() and
// PrepareRestore() come before it, on one thread). Stop() may be called from any thread (an
// atomic flag the loop reads once a pass, at most 50 ms apart). The metrics endpoint's thread
// reads only what scheduler_metrics.h locks.
#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/time.h"
#include "common/wire.h"
#include "server/checkpoint/store.h"
#include "server/scheduler/checkpoints.h"
#include "server/scheduler/liveness.h"
#include "server/scheduler/metrics.h"
#include "server/scheduler/registration.h"
#include "server/scheduler/state.h"
#include "server/scheduler/tables.h"

namespace pushpull::scheduler {
namespace {

using scheduler::Node;
using scheduler::Waiter;

class SchedulerImpl final : public Scheduler, private scheduler::Outbox, private scheduler::Events {
 public:
  explicit SchedulerImpl(const SchedulerOptions& o)
      : options_(o),
        transport_(o.transport ? o.transport : NewZmqTransport()),
        state_(options_, this),
        liveness_(&state_, this),
        checkpoints_(&state_, &liveness_),
        registration_(&state_, &liveness_, &checkpoints_.restore(), this),
        tables_(&state_) {}

  Status Init();
  Status PrepareRestore() override { return checkpoints_.PrepareRestore(); }
  Status Run() override;
  void Stop() override { stop_ = true; }
  const std::string& address() const override { return address_; }
  int metrics_port() const override { return metrics_ ? metrics_->port() : -1; }

 private:
  // Outbox: the one place messages go out on the socket.
  bool Send(const std::string& identity, Header h) override;
  // Events.
  void End(Membership::JobState state, const std::string& reason) override;
  void WorkerGone(int rank) override;
  void WorkersChanged() override;

  // A message from the peer with this routing identity, handed to its part.
  void Handle(const std::string& identity, const Header& h);
  // After the job ended: a node is sent the end, and counts as told once it heard it.
  void TellEnd(Node& n, const Header& h);
  void HandleBarrier(Node& n, const Header& h);
  void CheckBarrier();
  // Ends the job, finished, once no worker is awaited.
  void CheckDone();
  void PublishMetrics();

  const SchedulerOptions options_;
  // Declared first among the networking members: it outlives the socket it made.
  const std::shared_ptr<Transport> transport_;
  std::unique_ptr<Socket> router_;
  std::string address_;
  std::atomic<bool> stop_{false};

  scheduler::State state_;
  scheduler::Liveness liveness_;
  scheduler::Checkpoints checkpoints_;
  scheduler::Registration registration_;
  scheduler::Tables tables_;
  std::map<int, Waiter> barrier_;  // worker rank -> waiter
  int64_t end_deadline_ms_ = 0;    // once the job ended: when Run() returns at the latest
  // Run(): a pass (a poll of at most 50 ms, then handling) that takes longer than this stalled.
  static constexpr int64_t kPassSlackMs = 200;

  std::unique_ptr<scheduler::Metrics> metrics_;    // null: not served
  scheduler::Metrics::Snapshot metrics_snapshot_;  // filled for each Publish (its storage reused)
};

Status SchedulerImpl::Init() {
  SocketOptions so;
  so.max_msg_bytes = 16 << 20;
  PP_ASSIGN_OR_RETURN(router_, transport_->MakeSocket(SocketKind::kRouter, so));
  PP_ASSIGN_OR_RETURN(address_, BindTcp(*router_, options_.bind_host, options_.port, options_.advertise_host));
  // A checkpoint directory that cannot be written fails now, not at the first checkpoint.
  if (!options_.checkpoint_dir.empty()) PP_RETURN_IF_ERROR(checkpoint::EnsureWritableDir(options_.checkpoint_dir));
  if (options_.metrics_port >= 0) {
    PP_ASSIGN_OR_RETURN(metrics_, scheduler::Metrics::Start(options_.bind_host, options_.metrics_port,
                                                            options_.num_servers, options_.num_workers));
  }
  return Status::OK();
}

bool SchedulerImpl::Send(const std::string& identity, Header h) {
  h.sender_role = Role::kScheduler;
  Frame id(identity.data(), identity.size());
  Status st = SendMessage(*router_, &id, h);
  if (!st.ok()) PP_LOG(Debug) << "send " << MsgTypeName(h.type) << ": " << st.ToString();
  return st.ok();
}

Status SchedulerImpl::Run() {
  SetLogTag("scheduler");
  SetThreadName("pp-scheduler");
  PP_RETURN_IF_ERROR(PrepareRestore());
  registration_.Start();
  Membership& membership = state_.membership;
  membership.worker_alive.assign(options_.num_workers, 1);
  membership.server_alive.assign(options_.num_servers, 1);
  membership.worker_done.assign(options_.num_workers, 0);
  membership.worker_last_clock.assign(options_.num_workers, -1);
  membership.version = 1;
  PP_LOG(Info) << "listening at " << address_ << ", waiting for " << Count(options_.num_servers, "server") << " and "
               << Count(options_.num_workers, "worker");
  checkpoints_.WarnOfAnotherRun();
  std::vector<Frame> frames;
  int64_t last_pass_ms = NowMs(), last_judged_ms = last_pass_ms;
  while (!stop_) {
    PollItem item{router_.get()};
    transport_->Poll(&item, 1, 50);
    bool drained = !item.ready;
    for (int i = 0; i < 256 && !drained; ++i) {
      if (!RecvFrames(*router_, &frames, 3)) {
        drained = true;
        break;
      }
      Message m;
      std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
      frames.erase(frames.begin());
      Status st = Decode(&frames, &m);
      if (!st.ok()) {
        PP_LOG(Warning) << "dropping malformed control message: " << st.ToString();
        continue;
      }
      try {
        Handle(identity, m.header);
      } catch (const std::exception& e) {
        // (Out of memory, or a bug: the job's state may be half changed. It ends, saying why,
        // rather than the process ending with nothing said and the nodes waiting for it.)
        const std::string why =
            std::string("the scheduler failed handling a ") + MsgTypeName(m.header.type) + " message: " + e.what();
        PP_LOG(Error) << why;
        End(Membership::kAborted, why);
      }
    }
    registration_.CheckDeadline();
    // Time this loop did not run (a slow checkpoint commit, the process paused) is no node's
    // silence: heartbeats sent meanwhile are still on their way in. Only a stall of half a
    // heartbeat timeout or more is forgiven: passes that are merely slow, throttled, would
    // otherwise stretch every node's timeout.
    const int64_t now = NowMs(), stalled = now - last_pass_ms - kPassSlackMs;
    if (stalled > 0 && stalled + kPassSlackMs >= options_.heartbeat_timeout_ms / 2)
      liveness_.ForgiveStall(now, stalled);
    last_pass_ms = now;
    if (metrics_) PublishMetrics();
    const bool running = membership.job_state == Membership::kRunning;
    // Judged on every message that has arrived; under a flood that outlasts the pass's share, at
    // least once a heartbeat timeout. Before the job starts, a registered node gone silent gives
    // its slot back, judged as the running job's nodes are.
    const bool judge = drained || now - last_judged_ms > options_.heartbeat_timeout_ms;
    if (!state_.registered && running && judge) {
      registration_.DropSilentRegistrants(now);
      last_judged_ms = now;
    }
    if (state_.registered && running) {
      if (judge) {
        liveness_.Check(now);  // the time the stall was measured at: a pause after it is not judged
        last_judged_ms = now;
      }
      tables_.Check();
      checkpoints_.Tick();
    }
    if (membership.job_state != Membership::kRunning) {
      std::string untold;
      for (auto& [id, n] : state_.nodes)
        if (n.alive && !n.told_end) untold += (untold.empty() ? "" : ", ") + scheduler::NodeName(n);
      if (untold.empty()) break;
      if (NowMs() > end_deadline_ms_) {
        PP_LOG(Warning) << "ending without word that " << untold << " heard the job's end";
        break;
      }
    }
  }
  if (stop_ && membership.job_state == Membership::kRunning) {
    End(Membership::kAborted, "scheduler stopped");
  }
  if (metrics_) PublishMetrics();  // (the job's end, for a scrape before the daemon exits)
  if (membership.job_state == Membership::kFinished) {
    PP_LOG(Info) << "job finished: " << membership.reason;
    return Status::OK();
  }
  PP_LOG(Error) << "job aborted: " << membership.reason;
  return Status(state_.end_code, membership.reason);
}

void SchedulerImpl::Handle(const std::string& identity, const Header& h) {
  if (h.type == MsgType::kNodeExited) {  // (from the launcher, which registers as no node)
    liveness_.HandleNodeExited(h);
    return;
  }
  if (h.type == MsgType::kRegister) {
    registration_.HandleRegister(identity, h);
    return;
  }
  if (!state_.registered && h.type == MsgType::kHeartbeat) {
    registration_.HandleWaitingHeartbeat(identity);
    return;
  }
  auto it = state_.nodes.find(identity);
  if (it == state_.nodes.end() || !state_.registered) {
    // (A worker waiting to take a dead one's place heartbeats meanwhile: not worth a warning each.)
    if (h.type == MsgType::kHeartbeat)
      PP_LOG(Debug) << "ignoring a heartbeat from an unregistered peer";
    else
      PP_LOG(Warning) << "ignoring " << MsgTypeName(h.type) << " from an unregistered peer";
    return;
  }
  Node& n = it->second;
  n.last_seen_ms = NowMs();
  if (!n.alive) {
    liveness_.AnswerDeadNode(n);
    return;
  }
  const MsgType type = h.type;
  const bool request = n.role == Role::kWorker && scheduler::State::ReplyTypeOf(type).has_value();
  // Asked again: answered from the record, never run twice (after the end too: a last worker's
  // finish, whose answer went out with the end).
  const bool repeat = request && state_.AnswerRepeat(n, h);
  if (state_.membership.job_state != Membership::kRunning) {
    TellEnd(n, h);
    return;
  }
  if (repeat) return;
  if (request) {
    n.requests.emplace(h.request_id, std::nullopt);
    n.last_request = h.request_id;
  }
  switch (type) {
    case MsgType::kHeartbeat:
      // Clock 0: it holds no membership yet (a node in its Register(), which heartbeats with clock
      // 0): the answer to its registration was lost with a dropped connection. Without it again,
      // it would wait out its registration deadline while the job counts it alive.
      if (h.clock == 0)
        registration_.AnswerAgain(n);
      else
        state_.SendMembership(identity);
      break;
    case MsgType::kCreateTable:
      if (n.role == Role::kWorker) tables_.HandleCreate(identity, h);
      break;
    case MsgType::kCreateTableReply:
      if (n.role == Role::kServer) tables_.HandleServerReply(n, h);
      break;
    case MsgType::kBarrier:
      if (n.role == Role::kWorker) HandleBarrier(n, h);
      break;
    case MsgType::kCheckpoint:
      if (n.role == Role::kWorker) checkpoints_.HandleAsk(n, h);
      break;
    case MsgType::kCheckpointReply:
      if (n.role == Role::kServer) checkpoints_.HandleServerReply(n, h);
      break;
    case MsgType::kWorkerClocks:
      if (n.role == Role::kServer) liveness_.HandleWorkerClocks(n, h);
      break;
    case MsgType::kDone: liveness_.HandleDone(n, h); break;
    default: PP_LOG(Warning) << "unexpected " << MsgTypeName(h.type) << " from " << scheduler::NodeName(n);
  }
}

void SchedulerImpl::TellEnd(Node& n, const Header& h) {
  const bool holds_end =
      h.type == MsgType::kHeartbeat && h.clock >= 0 && static_cast<uint64_t>(h.clock) >= state_.membership.version;
  if (state_.SendMembership(n.identity) && (!n.end_heard || holds_end)) n.told_end = true;
}

void SchedulerImpl::HandleBarrier(Node& n, const Header& h) {
  // A barrier in place of one still waiting (no client sends one, a peer may): the first is no
  // longer in progress, so its record entry goes (else it would stay, unanswered, for ever).
  if (auto was = barrier_.find(n.rank); was != barrier_.end() && was->second.request_id != h.request_id)
    n.requests.erase(was->second.request_id);
  barrier_[n.rank] = Waiter{n.identity, h.request_id};
  CheckBarrier();
}

void SchedulerImpl::CheckBarrier() {
  if (barrier_.empty()) return;
  for (Node* w : state_.workers)
    if ((w->alive || liveness_.Replacing(w->rank)) && !w->done && !barrier_.count(w->rank)) return;
  for (auto& [rank, waiter] : barrier_) state_.ReplyTo(waiter, MsgType::kBarrierReply, Status::OK());
  barrier_.clear();
}

void SchedulerImpl::CheckDone() {
  if (state_.membership.job_state != Membership::kRunning) return;
  int live = 0, dead = 0;
  for (Node* w : state_.workers) {
    if ((w->alive || liveness_.Replacing(w->rank)) && !w->done) return;
    (w->alive ? live : dead)++;
  }
  End(Membership::kFinished, Count(live, "worker") + " finished" + (dead ? ", " + std::to_string(dead) + " died" : ""));
}

void SchedulerImpl::WorkerGone(int rank) {
  barrier_.erase(rank);
  checkpoints_.ForgetAsk(rank);
}

void SchedulerImpl::WorkersChanged() {
  CheckBarrier();
  checkpoints_.Check();
  CheckDone();
}

void SchedulerImpl::End(Membership::JobState state, const std::string& reason) {
  Membership& membership = state_.membership;
  if (membership.job_state != Membership::kRunning) return;
  membership.job_state = state;
  membership.reason = reason;
  membership.version++;
  for (auto& [id, n] : state_.nodes) n.told_end = false;
  state_.Broadcast();
  // Workers that finished before were answered then, and may have exited since: nothing to tell.
  for (auto& [id, n] : state_.nodes)
    if (n.done) n.told_end = true;
  // Give nodes that missed the broadcast a heartbeat's chance to hear it.
  end_deadline_ms_ = NowMs() + std::min(options_.heartbeat_timeout_ms, 2000);
  // Pending callers learn why.
  Status st = Status::Aborted("job ended: " + reason);
  for (auto& [rank, w] : barrier_) state_.ReplyTo(w, MsgType::kBarrierReply, st);
  barrier_.clear();
  checkpoints_.Fail(st);
  tables_.FailAll(st);
}

void SchedulerImpl::PublishMetrics() {
  scheduler::Metrics::Snapshot& s = metrics_snapshot_;
  s.membership = state_.membership;
  s.registered = state_.registered;
  s.servers_registered = state_.servers.size();
  s.workers_registered = state_.workers.size();
  s.tables = tables_.created();
  s.barrier_waiting = barrier_.size();
  s.committed_clock = checkpoints_.committed_clock();
  s.checkpoints = checkpoints_.committed();
  metrics_->Publish(&s);
}

}  // namespace

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options) {
  if (options.num_servers < 1 || options.num_workers < 1)
    return Status::InvalidArgument("need at least one server and one worker");
  if (options.num_servers > 4096 || options.num_workers > 4096)
    return Status::InvalidArgument("at most 4096 servers and 4096 workers");
  if (options.port < 0 || options.port > 65535)
    return Status::InvalidArgument("port " + std::to_string(options.port) +
                                   " must be in [0, 65535] (0: any free port)");
  for (auto [name, ms] : {std::pair<const char*, int>{"heartbeat_timeout_ms", options.heartbeat_timeout_ms},
                          {"register_timeout_ms", options.register_timeout_ms},
                          {"table_timeout_ms", options.table_timeout_ms},
                          {"checkpoint_timeout_ms", options.checkpoint_timeout_ms}})
    if (ms < 1) return Status::InvalidArgument(std::string(name) + " must be at least 1, not " + std::to_string(ms));
  if (options.metrics_port < -1 || options.metrics_port > 65535)
    return Status::InvalidArgument("metrics_port " + std::to_string(options.metrics_port) +
                                   " must be in [0, 65535] (0: any free port), or -1 (not served)");
  if (options.checkpoint_keep < 1)
    return Status::InvalidArgument("checkpoint_keep must be at least 1 (the newest checkpoint is always kept), not " +
                                   std::to_string(options.checkpoint_keep));
  auto s = std::make_unique<SchedulerImpl>(options);
  PP_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<Scheduler>(std::move(s));
}

}  // namespace pushpull::scheduler
