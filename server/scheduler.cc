#include "server/scheduler.h"

#include <algorithm>
#include <filesystem>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "common/time.h"
#include "common/wire.h"
#include "server/checkpoint.h"

namespace pushpull {
namespace {

struct Node {
  Role role = Role::kWorker;
  int rank = -1;
  std::string identity;
  std::string address;
  bool alive = true;
  bool done = false;
  Status left;  // why it stopped early, as it said (Client::Leave; a server stopped mid-job)
  std::string death;  // why it was declared dead (alive false)
  bool told_end = false;   // has been sent the final membership
  bool end_heard = false;  // told_end only once it heartbeats that it holds the final membership
  int64_t last_seen_ms = 0;
  uint64_t register_request = 0;
  int64_t register_answered_ms = 0;  // when its registration was last answered
  // A worker's requests still in progress and the last kRememberedAnswers it was answered (by
  // request id), with their answers: a worker asks again what it has no answer to (its
  // connection may have dropped with the request or the answer), and a repeat is answered from
  // here, never run twice. A worker's request ids only grow, so an id at most last_request that
  // is not here is a repeat of a request whose answer was forgotten.
  std::map<uint64_t, std::optional<Header>> requests;
  std::deque<uint64_t> answered;  // ids in `requests` with an answer, oldest answer first
  uint64_t last_request = 0;
  static constexpr size_t kRememberedAnswers = 8;
};

struct Waiter {
  std::string identity;
  uint64_t request_id;
};

struct PendingTable {
  TableInfo info;
  std::vector<Waiter> waiters;
  std::set<int> acked;  // server ranks
  Deadline deadline = Deadline::Never();
  uint64_t request_id = 0;
  int64_t resend_ms = 0;  // when the servers that have not answered are asked again
};

// A checkpoint in progress: the workers that asked (and at which clock), then the servers that
// wrote their files.
struct PendingCheckpoint {
  struct Ask {
    Waiter waiter;
    int64_t clock = 0;
    std::string run;  // how the worker's run counts its clocks (Client::Checkpoint)
  };
  std::map<int, Ask> workers;                          // rank -> its ask
  std::string run;                                     // the askers' (all the same)
  bool writing = false;                               // servers asked
  int64_t clock = 0;
  std::string dir;
  std::set<int> written;                              // server ranks
  uint64_t request_id = 0;
  Deadline deadline = Deadline::Never();
  int64_t started_ms = 0;
  int64_t resend_ms = 0;  // writing: when the servers that have not answered are asked again
};

class SchedulerImpl final : public Scheduler {
 public:
  explicit SchedulerImpl(const SchedulerOptions& o) : options_(o), router_(ctx_, zmq::socket_type::router) {}

  Status Init() {
    ConfigureSocket(router_, true, 16 << 20);
    auto a = BindTcp(router_, options_.bind_host, options_.port, options_.advertise_host);
    if (!a.ok()) return a.status();
    address_ = a.value();
    // A checkpoint directory that cannot be written fails now, not at the first checkpoint.
    if (!options_.checkpoint_dir.empty()) PP_RETURN_IF_ERROR(EnsureWritableDir(options_.checkpoint_dir));
    if (options_.metrics_port >= 0) {
      auto m = MetricsEndpoint::Start(options_.bind_host, options_.metrics_port, [this] { return RenderMetrics(); });
      if (!m.ok()) return m.status();
      metrics_ = std::move(m.value());
    }
    return Status::OK();
  }
  int metrics_port() const override { return metrics_ ? metrics_->port() : -1; }
  Status PrepareRestore() override {
    if (!restore_prepared_) {
      restore_prepared_ = true;
      restore_status_ = ResolveRestore();  // (a second call gets the first's answer)
    }
    return restore_status_;
  }
  Status ResolveRestore() {
    if (options_.restore_from.empty()) return Status::OK();
    // The newest complete checkpoint under the directory, or the one it is (a ckpt-NNN
    // directory: an older one when the newest is damaged).
    std::error_code ec;
    std::filesystem::path named = std::filesystem::path(options_.restore_from).lexically_normal();
    if (!named.has_filename()) named = named.parent_path();
    // A ckpt-... directory without a MANIFEST is one checkpoint left incomplete (said so below),
    // unless it is a root itself (a LATEST, or checkpoints under it): an operator's root may be
    // named ckpt-something too.
    const bool one = std::filesystem::exists(named / "MANIFEST", ec) ||
                     (named.filename().string().rfind("ckpt-", 0) == 0 &&
                      !std::filesystem::exists(named / "LATEST", ec) && CheckpointNames(named.string()).empty());
    // Every file is read once here, so that a damaged newest checkpoint is passed over for the
    // one before it instead of failing every server's restore (and every restart's).
    if (options_.verify_restore)
      PP_LOG(Info) << "--restore_from: reading the checkpoint's files to check them before the job starts (the "
                   << "nodes' --register_timeout_ms runs meanwhile; --verify_restore=false skips this)";
    const int64_t began = NowMs();
    std::vector<std::string> skipped;
    auto m = one ? ReadManifest(options_.restore_from)
             : options_.verify_restore ? NewestIntactCheckpoint(options_.restore_from, &skipped)
                                       : ReadLatestCheckpoint(options_.restore_from);
    if (m.ok() && one && options_.verify_restore) {
      Status intact = VerifyCheckpointFiles(*m);
      if (!intact.ok()) m = intact;
    }
    for (const std::string& s : skipped)
      PP_LOG(Warning) << "--restore_from: passing over checkpoint " << s;
    if (!m.ok()) return m.status().Annotate("--restore_from");
    if (!skipped.empty())
      PP_LOG(Warning) << "--restore_from: resuming from the older checkpoint " << m->dir << " (clock " << m->clock
                      << "); the training since then is done again";
    restore_ = *m;
    if (options_.verify_restore) {
      const int64_t took = NowMs() - began;
      PP_LOG(Info) << "--restore_from: " << m->dir << " checked in " << took / 1000.0 << " s";
      if (took > options_.register_timeout_ms / 2)
        PP_LOG(Warning) << "checking the checkpoint took over half of --register_timeout_ms ("
                        << options_.register_timeout_ms / 1000 << " s), which the nodes' registration waits "
                        << "count too: raise it on every node, or pass --verify_restore=false";
    }
    if (m->servers != options_.num_servers)
      PP_LOG(Info) << "checkpoint " << m->dir << " was written by " << Count(m->servers, "server") << "; this job has "
                   << options_.num_servers << ": each server gathers the rows it now owns from every file";
    if (m->workers != options_.num_workers)
      PP_LOG(Warning) << "checkpoint " << m->dir << " was written by a job of " << m->workers
                      << " workers; this one has " << options_.num_workers
                      << ": data shards and BSP means differ from the checkpointed run";
    PP_LOG(Info) << "restoring from " << restore_.dir << ": clock " << restore_.clock << ", written by "
                 << Count(restore_.servers, "server") << " and " << Count(restore_.workers, "worker");
    // The newest checkpoint this job has, when it is in --checkpoint_dir: a checkpoint asked for
    // at its clock is taken already, and LATEST goes back to it while a newer one is rewritten.
    // One from elsewhere is another run's (found in review: a checkpoint at the restored clock was
    // "already taken" though --checkpoint_dir had none, and LATEST there could be pointed at
    // whatever that directory held under the restored clock's name).
    std::filesystem::path from = std::filesystem::absolute(restore_.dir, ec).lexically_normal();
    if (!from.has_filename()) from = from.parent_path();
    if (!options_.checkpoint_dir.empty() &&
        std::filesystem::equivalent(from.parent_path(), options_.checkpoint_dir, ec))
      committed_clock_ = restore_.clock;
    return Status::OK();
  }
  Status Run() override;
  void Stop() override { stop_ = true; }
  const std::string& address() const override { return address_; }

 private:
  void Handle(Message& m);
  void HandleRegister(Message& m);
  void RegisterReplacement(Message& m);
  Header RegisterReply() const;
  // Sends node n its registration's answer (h: a RegisterReply()), noting when.
  bool AnswerRegistration(Node& n, Header h);
  void HandleCreateTable(Message& m);
  void HandleServerTableReply(Node& server, const Message& m);
  void CheckLiveness(int64_t now);
  // A worker declared dead is kWorkerDying until every live server has said where its clock is
  // (kWorkerClocks), or kDyingReportMs passed; then it is dead (or awaits a replacement) at the
  // clock they agree on (DESIGN.md, "A worker dying between its clocks").
  void HandleWorkerClocks(const Node& server, const Message& m);
  // Past a dying worker's deadline, decides without the servers that have not reported; only from
  // CheckLiveness, whose pass has forgiven a stall first (found in review: the first report
  // handled after a stall found the deadline passed and decided on that one server's word, with
  // the others' reports next in the same batch).
  void SettleDying(bool decide_without_missing = false);
  int LiveWorkers() const;
  // A worker dying or declared dead: the new membership goes out, and what waited on the worker
  // (a barrier, a checkpoint, the job's end) is looked at again.
  void AnnounceWorkerDeaths(const std::string& reason);
  // Before the job starts: a registered node silent for a heartbeat timeout (killed while it
  // waited) gives its slot back, so that its restart, or another node, can have it.
  void DropSilentRegistrants(int64_t now);
  // Before the job starts: forgets a registered node (it is told `why`, in case it still listens).
  void DropRegistrant(const Node& n, const Status& why);
  void CheckBarrier();
  void CheckDone();
  void CheckPendingTables();
  void HandleCheckpoint(Node& worker, const Message& m);
  void HandleServerCheckpointReply(Node& server, const Message& m);
  void CheckCheckpoint();
  void FailCheckpoint(const Status& st);
  void Broadcast();
  void End(Membership::JobState state, const std::string& reason);
  bool Send(const std::string& identity, Header h);  // false when ZeroMQ refused it (peer gone)
  // A request to the servers (a table creation, a checkpoint write) that some have not answered
  // is sent again to those every resend interval, in case it or the answer went with a dropped
  // connection (servers answer a repeat without running it twice). ResendDue: true, and the next
  // time set, when it is due (first: at once).
  bool ResendDue(int64_t* resend_ms);
  void SendToServers(const Header& h, const std::set<int>& answered);
  static Header TableRequest(const PendingTable& p);
  // The answer's type of a worker's request the scheduler answers; nothing for other messages.
  static std::optional<MsgType> ReplyTypeOf(MsgType request);
  // A request of worker n seen before: answers it from the record (nothing while it is in
  // progress) and returns true; false for a new one.
  bool AnswerRepeat(const Node& n, const Header& req);
  Header CheckpointRequest() const;
  // A third of the heartbeat timeout, at most a second: a few small messages while a request is
  // open, to the servers that have not answered it.
  int64_t ResendIntervalMs() const { return std::clamp(options_.heartbeat_timeout_ms / 3, 100, 1000); }
  void ReplyTo(const Waiter& w, MsgType type, const Status& st, const TableInfo* info = nullptr);
  std::string NodeName(const Node& n) const;
  Membership membership_;
  Code end_code_ = Code::kAborted;  // Run()'s code when the job is aborted
  // The clock of this job's newest committed checkpoint (or the one it was restored from; -1:
  // none): a worker asking for one at or before it is answered at once (a replacement that took
  // a dead worker's place at that clock catches up on the checkpoint the dead one would have asked for).
  int64_t committed_clock_ = -1;

  const SchedulerOptions options_;
  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::string address_;
  std::atomic<bool> stop_{false};

  std::map<std::string, Node> nodes_;  // by identity (a replaced worker's stays, dead: told so if it calls)
  std::map<int, Deadline> replacing_;  // wait_for_replacement: dead workers' ranks, until when
  // Dying workers (kWorkerDying): the membership version that said so, and until when the
  // servers' reports are waited for.
  struct Dying {
    uint64_t version = 0;
    Deadline deadline = Deadline::Never();
  };
  std::map<int, Dying> dying_;
  std::set<std::string> told_not_yet_;  // early workers told "not yet" (logged once each)
  // Each server's latest kWorkerClocks: the membership version it answered, its clocks and flags.
  struct ClocksReport {
    uint64_t version = 0;
    std::vector<int64_t> clocks;
    std::vector<uint8_t> settled;
  };
  std::map<int, ClocksReport> clocks_reports_;
  // Awaited by barriers, checkpoints and the job's end: a rank whose replacement the job waits
  // for, or will once its dying is settled.
  bool Replacing(int rank) const {
    return replacing_.count(rank) > 0 || (options_.wait_for_replacement && dying_.count(rank) > 0);
  }
  std::vector<Node*> servers_, workers_;
  bool registered_ = false;
  int64_t start_ms_ = 0;
  // Run(): a pass (a poll of at most 50 ms, then handling) that takes longer than this stalled.
  static constexpr int64_t kPassSlackMs = 200;
  int64_t end_deadline_ms_ = 0;

  std::map<std::string, TableInfo> tables_;
  std::map<std::string, PendingTable> pending_tables_;
  std::map<std::string, TableInfo> failed_tables_;  // by name: creations that failed (see HandleCreateTable)
  uint32_t next_table_id_ = 0;
  uint64_t next_request_id_ = 1;
  std::map<int, Waiter> barrier_;  // worker rank -> waiter
  PendingCheckpoint checkpoint_;
  CheckpointManifest restore_;     // clock 0, no dir: a fresh job
  bool restore_prepared_ = false;
  Status restore_status_;

  // What /metrics shows: copied from the loop's state after each pass (PublishMetrics), read on
  // the metrics thread (RenderMetrics).
  struct MetricsSnapshot {
    Membership membership;
    bool registered = false;
    size_t tables = 0, barrier_waiting = 0;
    size_t servers_registered = 0, workers_registered = 0;  // before the job starts
    int64_t committed_clock = -1;
    uint64_t checkpoints = 0;
  };
  void PublishMetrics();
  std::string RenderMetrics() const;
  uint64_t checkpoints_committed_ = 0;
  mutable std::mutex metrics_mu_;
  MetricsSnapshot metrics_snapshot_;  // guarded by metrics_mu_
  // Declared after everything RenderMetrics reads: destroyed, its thread stopped, before them.
  std::unique_ptr<MetricsEndpoint> metrics_;
};

std::string SchedulerImpl::NodeName(const Node& n) const {
  std::string s = std::string(RoleName(n.role)) + " " + std::to_string(n.rank);
  if (!n.address.empty()) s += " (" + n.address + ")";
  return s;
}

bool SchedulerImpl::Send(const std::string& identity, Header h) {
  h.sender_role = Role::kScheduler;
  zmq::message_t id(identity.data(), identity.size());
  Status st = SendMessage(router_, &id, h);
  if (!st.ok()) PP_LOG(Debug) << "send " << MsgTypeName(h.type) << ": " << st.ToString();
  return st.ok();
}

void SchedulerImpl::ReplyTo(const Waiter& w, MsgType type, const Status& st, const TableInfo* info) {
  Header h;
  h.type = type;
  h.request_id = w.request_id;
  h.SetStatus(st);
  if (info) {
    h.info = *info;
    h.spec = info->spec;
  }
  auto n = nodes_.find(w.identity);
  if (n != nodes_.end()) {
    Node& node = n->second;
    auto r = node.requests.find(w.request_id);
    if (r != node.requests.end() && !r->second) {
      r->second = h;  // a repeat of the request gets this again
      node.answered.push_back(w.request_id);
      while (node.answered.size() > Node::kRememberedAnswers) {  // (those in progress stay)
        node.requests.erase(node.answered.front());
        node.answered.pop_front();
      }
    }
  }
  Send(w.identity, h);
}

bool SchedulerImpl::AnswerRepeat(const Node& n, const Header& req) {
  auto r = n.requests.find(req.request_id);
  if (r != n.requests.end()) {
    if (r->second) Send(n.identity, *r->second);  // else still in progress: answered when done
    return true;
  }
  if (req.request_id > n.last_request) return false;  // a new request
  Header h;
  h.type = *ReplyTypeOf(req.type);
  h.request_id = req.request_id;
  h.SetStatus(Status::FailedPrecondition(std::string(MsgTypeName(req.type)) + " request " +
                                         std::to_string(req.request_id) +
                                         " asked again after the scheduler forgot its answer"));
  Send(n.identity, h);
  return true;
}

std::optional<MsgType> SchedulerImpl::ReplyTypeOf(MsgType request) {
  switch (request) {
    case MsgType::kCreateTable: return MsgType::kCreateTableReply;
    case MsgType::kBarrier: return MsgType::kBarrierReply;
    case MsgType::kCheckpoint: return MsgType::kCheckpointReply;
    case MsgType::kDone: return MsgType::kDoneReply;
    default: return std::nullopt;
  }
}

bool SchedulerImpl::ResendDue(int64_t* resend_ms) {
  const int64_t now = NowMs();
  if (now < *resend_ms) return false;
  *resend_ms = now + ResendIntervalMs();
  return true;
}

void SchedulerImpl::SendToServers(const Header& h, const std::set<int>& answered) {
  for (Node* s : servers_)
    if (!answered.count(s->rank)) Send(s->identity, h);
}

Status SchedulerImpl::Run() {
  SetLogTag("scheduler");
  SetThreadName("pp-scheduler");
  PP_RETURN_IF_ERROR(PrepareRestore());
  start_ms_ = NowMs();  // (the registration deadline runs from here)
  membership_.worker_alive.assign(options_.num_workers, 1);
  membership_.server_alive.assign(options_.num_servers, 1);
  membership_.worker_done.assign(options_.num_workers, 0);
  membership_.worker_last_clock.assign(options_.num_workers, -1);
  membership_.version = 1;
  PP_LOG(Info) << "listening at " << address_ << ", waiting for " << Count(options_.num_servers, "server")
               << " and " << Count(options_.num_workers, "worker");
  if (!options_.checkpoint_dir.empty() && options_.restore_from.empty()) {
    auto earlier = ReadLatestCheckpoint(options_.checkpoint_dir);
    if (earlier.ok())
      PP_LOG(Warning) << "--checkpoint_dir " << options_.checkpoint_dir << " already holds another run's checkpoints "
                      << "(newest: " << earlier->dir << "); this fresh run's checkpoints replace those at the "
                      << "same clocks (--restore_from continues that run instead)";
  }
  std::vector<zmq::message_t> frames;
  int64_t last_pass_ms = NowMs(), last_judged_ms = last_pass_ms;
  while (!stop_) {
    zmq::pollitem_t item{static_cast<void*>(router_), 0, ZMQ_POLLIN, 0};
    Poll(&item, 1, 50);
    bool drained = !(item.revents & ZMQ_POLLIN);
    for (int i = 0; i < 256 && !drained; ++i) {
      if (!RecvFrames(router_, &frames, 3)) {
        drained = true;
        break;
      }
      Message m;
      std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
      m.identity = std::move(frames[0]);
      frames.erase(frames.begin());
      Status st = Decode(&frames, &m);
      if (!st.ok()) {
        PP_LOG(Warning) << "dropping malformed control message: " << st.ToString();
        continue;
      }
      try {
        Handle(m);
      } catch (const std::exception& e) {
        // (Out of memory, or a bug: the job's state may be half changed. It ends, saying why,
        // rather than the process ending with nothing said and the nodes waiting for it.)
        const std::string why =
            std::string("the scheduler failed handling a ") + MsgTypeName(m.header.type) + " message: " + e.what();
        PP_LOG(Error) << why;
        End(Membership::kAborted, why);
      }
    }
    if (!registered_ && NowMs() - start_ms_ > options_.register_timeout_ms) {
      int s = 0, w = 0;
      for (auto& [id, n] : nodes_) (n.role == Role::kServer ? s : w)++;
      End(Membership::kAborted,
          "registration timed out after " + std::to_string(options_.register_timeout_ms) + " ms: " +
              std::to_string(s) + "/" + std::to_string(options_.num_servers) + " servers and " +
              std::to_string(w) + "/" + std::to_string(options_.num_workers) + " workers registered");
    }
    // Time this loop did not run (a slow checkpoint commit, the process paused) is no node's
    // silence: heartbeats sent meanwhile are still on their way in. The nodes' last heartbeats
    // move on by it before they are judged.
    // (Only a stall of half a heartbeat timeout or more: passes that are merely slow, throttled,
    // would otherwise stretch every node's timeout.)
    const int64_t now = NowMs(), stalled = now - last_pass_ms - kPassSlackMs;
    if (stalled > 0 && stalled + kPassSlackMs >= options_.heartbeat_timeout_ms / 2) {
      for (auto& [id, n] : nodes_) n.last_seen_ms = std::min(now, n.last_seen_ms + stalled);
      // (And the wait for the servers' word on a dying worker's clock: theirs may be in.)
      for (auto& [rank, d] : dying_) d.deadline = Deadline::In(d.deadline.at_ms() + stalled - now);
      if (stalled > 1000) PP_LOG(Warning) << "this loop stalled for " << stalled << " ms; not held against any node";
    }
    last_pass_ms = now;
    if (metrics_) PublishMetrics();
    // Before the job starts, a registered node gone silent gives its slot back: judged as the
    // running job's nodes are (after the stall is forgiven, on every message that has arrived).
    if (!registered_ && membership_.job_state == Membership::kRunning &&
        (drained || now - last_judged_ms > options_.heartbeat_timeout_ms)) {
      DropSilentRegistrants(now);
      last_judged_ms = now;
    }
    if (registered_ && membership_.job_state == Membership::kRunning) {
      // Judged on every message that has arrived; under a flood that outlasts the pass's share,
      // at least once a heartbeat timeout.
      if (drained || now - last_judged_ms > options_.heartbeat_timeout_ms) {
        CheckLiveness(now);  // the time the stall was measured at: a pause after it is not judged
        last_judged_ms = now;
      }
      CheckPendingTables();
      if (checkpoint_.writing && !checkpoint_.deadline.Expired())
        if (ResendDue(&checkpoint_.resend_ms)) SendToServers(CheckpointRequest(), checkpoint_.written);
      if (!checkpoint_.workers.empty() && checkpoint_.deadline.Expired()) {
        // Asking: a worker that never calls; writing: a server that never answers.
        std::string missing;
        if (checkpoint_.writing) {
          for (Node* s : servers_)
            if (!checkpoint_.written.count(s->rank)) missing += (missing.empty() ? "" : ", ") + NodeName(*s);
        } else {
          for (Node* w : workers_)
            if (w->alive && !w->done && !checkpoint_.workers.count(w->rank))
              missing += (missing.empty() ? "" : ", ") + NodeName(*w);
        }
        FailCheckpoint(Status::DeadlineExceeded(
            std::string(checkpoint_.writing ? "checkpoint at clock " + std::to_string(checkpoint_.clock) +
                                                  ": not written within "
                                            : "checkpoint: not asked for by every live worker within ") +
            std::to_string(options_.checkpoint_timeout_ms) + " ms; missing " + missing));
      }
    }
    if (membership_.job_state != Membership::kRunning) {
      std::string untold;
      for (auto& [id, n] : nodes_)
        if (n.alive && !n.told_end) untold += (untold.empty() ? "" : ", ") + NodeName(n);
      if (untold.empty()) break;
      if (NowMs() > end_deadline_ms_) {
        PP_LOG(Warning) << "ending without word that " << untold << " heard the job's end";
        break;
      }
    }
  }
  if (stop_ && membership_.job_state == Membership::kRunning) {
    End(Membership::kAborted, "scheduler stopped");
  }
  if (metrics_) PublishMetrics();  // (the job's end, for a scrape before the daemon exits)
  if (membership_.job_state == Membership::kFinished) {
    PP_LOG(Info) << "job finished: " << membership_.reason;
    return Status::OK();
  }
  PP_LOG(Error) << "job aborted: " << membership_.reason;
  return Status(end_code_, membership_.reason);
}

void SchedulerImpl::Handle(Message& m) {
  std::string identity(static_cast<const char*>(m.identity.data()), m.identity.size());
  if (m.header.type == MsgType::kRegister) {
    HandleRegister(m);
    return;
  }
  auto it = nodes_.find(identity);
  if (!registered_ && m.header.type == MsgType::kHeartbeat) {  // a node waiting for the job to start
    if (it != nodes_.end() && membership_.job_state == Membership::kRunning) {
      it->second.last_seen_ms = NowMs();
    } else if (it != nodes_.end()) {  // the job ended before it started (registration timed out): it hears so
      Header h;
      h.type = MsgType::kMembership;
      h.membership = membership_;
      Send(identity, h);
    } else {  // a node waiting for a registration this scheduler no longer holds: it hears so, once a beat
      PP_LOG(Debug) << "a heartbeat from a node whose registration is not held here";
      ReplyTo(Waiter{identity, 0}, MsgType::kRegisterReply,
              Status::Aborted("the scheduler holds no registration of this node (dropped for its silence, or "
                                  "lost with a connection): start it again"));
    }
    return;
  }
  if (it == nodes_.end() || !registered_) {
    // (A worker waiting to take a dead one's place heartbeats meanwhile: not worth a warning each.)
    if (m.header.type == MsgType::kHeartbeat) PP_LOG(Debug) << "ignoring a heartbeat from an unregistered peer";
    else PP_LOG(Warning) << "ignoring " << MsgTypeName(m.header.type) << " from an unregistered peer";
    return;
  }
  Node& n = it->second;
  n.last_seen_ms = NowMs();
  if (!n.alive) {
    // Declared dead already, yet it speaks (silent past the timeout: a paused process, a network
    // partition that healed): tell it so it stops. A worker in a running job hears it as a
    // registration the scheduler no longer holds, which ends the node (ControlChannel), with its
    // calls: the membership alone does not say which node it is (under --on_worker_death=wait its
    // rank may be alive again, another worker's), and its requests are never answered (found in
    // review: a Barrier() of a worker declared dead waited out its whole deadline).
    if (n.role == Role::kWorker && membership_.job_state == Membership::kRunning) {
      ReplyTo(Waiter{identity, 0}, MsgType::kRegisterReply,
              Status::Aborted("the scheduler declared this worker dead (" + n.death +
                              ") and the job went on without it: it must stop"));
      return;
    }
    Header h;
    h.type = MsgType::kMembership;
    h.membership = membership_;
    Send(identity, h);
    return;
  }
  const MsgType type = m.header.type;
  const bool request = n.role == Role::kWorker && ReplyTypeOf(type).has_value();
  // Asked again: answered from the record, never run twice (after the end too: a last worker's
  // finish, whose answer went out with the end).
  const bool repeat = request && AnswerRepeat(n, m.header);
  if (membership_.job_state != Membership::kRunning) {
    Header h;
    h.type = MsgType::kMembership;
    h.membership = membership_;
    const bool holds_end = type == MsgType::kHeartbeat && m.header.clock >= 0 &&
                           static_cast<uint64_t>(m.header.clock) >= membership_.version;
    if (Send(identity, h) && (!n.end_heard || holds_end)) n.told_end = true;
    return;
  }
  if (repeat) return;
  if (request) {
    n.requests.emplace(m.header.request_id, std::nullopt);
    n.last_request = m.header.request_id;
  }
  switch (type) {
    case MsgType::kHeartbeat: {
      if (m.header.clock == 0) {
        // Holding no membership yet (a node in its Register(), which heartbeats with clock 0):
        // the answer to its registration was lost with a dropped connection. Sent again; it
        // waited out its registration deadline while the job counted it alive (found in review).
        // (Not for a heartbeat that crossed the answer: one a second after it, at most.)
        if (NowMs() - n.register_answered_ms >= 1000 && AnswerRegistration(n, RegisterReply()))
          PP_LOG(Warning) << NodeName(n) << " has not heard that it registered: told again";
        break;
      }
      Header h;
      h.type = MsgType::kMembership;
      h.membership = membership_;
      Send(identity, h);
      break;
    }
    case MsgType::kCreateTable:
      if (n.role == Role::kWorker) HandleCreateTable(m);
      break;
    case MsgType::kCreateTableReply:
      if (n.role == Role::kServer) HandleServerTableReply(n, m);
      break;
    case MsgType::kBarrier:
      if (n.role == Role::kWorker) {
        // A barrier in place of one still waiting (no client sends one, a peer may): the first
        // is no longer in progress, so its record entry goes (found in review: each one stayed,
        // unanswered, for ever).
        if (auto was = barrier_.find(n.rank); was != barrier_.end() && was->second.request_id != m.header.request_id)
          n.requests.erase(was->second.request_id);
        barrier_[n.rank] = Waiter{identity, m.header.request_id};
        CheckBarrier();
      }
      break;
    case MsgType::kCheckpoint:
      if (n.role == Role::kWorker) HandleCheckpoint(n, m);
      break;
    case MsgType::kCheckpointReply:
      if (n.role == Role::kServer) HandleServerCheckpointReply(n, m);
      break;
    case MsgType::kWorkerClocks:
      if (n.role == Role::kServer) HandleWorkerClocks(n, m);
      break;
    case MsgType::kDone:
      if (!n.done && m.header.status != Code::kOk) {
        // A worker stopping early (Client::Leave), or a server stopped before the job ended:
        // declared dead at the next liveness check (a worker under --on_worker_death), for the
        // reason it gives rather than a heartbeat timeout later. (Asked again: answered again.)
        if (n.alive && n.left.ok()) {
          n.left = m.header.status_obj();
          PP_LOG(Error) << NodeName(n) << " is stopping: " << n.left.ToString();
        }
        ReplyTo(Waiter{identity, m.header.request_id}, MsgType::kDoneReply, Status::OK());
      } else if (n.role == Role::kWorker && !n.done) {
        n.done = true;
        PP_LOG(Info) << "worker " << n.rank << " finished";
        membership_.worker_done[n.rank] = 1;
        membership_.version++;
        CheckBarrier();
        CheckCheckpoint();
        CheckDone();
        if (membership_.job_state == Membership::kRunning) {
          Broadcast();
        } else {
          // This finish ended the job: the end goes out first (the worker, told the job finished
          // with its finish in it, heartbeats that it holds the end and completes Finish()), its
          // answer after; both may be lost with a connection that drops now. The worker counts
          // as told once that heartbeat comes, or at the end's deadline; until then it is
          // answered what it asks again.
          n.end_heard = true;
          n.told_end = false;
        }
        ReplyTo(Waiter{identity, m.header.request_id}, MsgType::kDoneReply, Status::OK());
      } else if (n.role == Role::kWorker) {
        // Again (a retried Finish whose first answer was lost): done already.
        ReplyTo(Waiter{identity, m.header.request_id}, MsgType::kDoneReply, Status::OK());
      }
      break;
    default:
      PP_LOG(Warning) << "unexpected " << MsgTypeName(m.header.type) << " from " << NodeName(n);
  }
}

void SchedulerImpl::HandleRegister(Message& m) {
  std::string identity(static_cast<const char*>(m.identity.data()), m.identity.size());
  Role role = m.header.sender_role;
  Waiter w{identity, m.header.request_id};
  // A worker taking a dead one's place in a running job (wait_for_replacement).
  // (One that asks for a rank takes that rank's place only: a deployment's rank stays its node's.)
  const int asked = m.header.sender_rank;
  const bool replacement = registered_ && role == Role::kWorker && !replacing_.empty() && !nodes_.count(identity) &&
                           membership_.job_state == Membership::kRunning && (asked < 0 || replacing_.count(asked));
  if (!replacement && (role == Role::kScheduler || registered_ || nodes_.count(identity))) {
    // Under --on_worker_death=wait a worker may come before the one it replaces is declared dead
    // (an orchestrator restarting it at once): Unavailable, which it asks again on until its
    // registration deadline.
    const bool early = registered_ && options_.wait_for_replacement && role == Role::kWorker &&
                       membership_.job_state == Membership::kRunning && !nodes_.count(identity) &&
                       asked < options_.num_workers;
    Status st = early ? Status::Unavailable((asked >= 0 ? "rank " + std::to_string(asked) + " is held"
                                                        : std::string("the job is running with all its workers")) +
                                            ": a new worker takes a dead one's place once the scheduler has declared "
                                            "it dead (after --heartbeat_timeout_ms of silence)")
                      : Status::FailedPrecondition(!registered_ ? "bad registration"
                                                                : "the job is already running with all its nodes");
    if (registered_ && !early) PP_LOG(Warning) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    if (early && told_not_yet_.insert(identity).second)  // (it asks again every 250 ms: said once)
      PP_LOG(Warning) << "a worker" << (asked >= 0 ? " for rank " + std::to_string(asked) : std::string())
                      << " came before a rank is free: told to ask again";
    ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  auto& list = role == Role::kServer ? servers_ : workers_;
  int want = role == Role::kServer ? options_.num_servers : options_.num_workers;
  int rank = m.header.sender_rank;  // a node may ask for one (a deployment's task index)
  if (role == Role::kServer && m.header.address.empty()) {
    ReplyTo(w, MsgType::kRegisterReply, Status::InvalidArgument("a server must give its address"));
    return;
  }
  // A node that heartbeats less than twice per timeout would be declared dead between two
  // heartbeats, over and over: refused at once, saying which two settings disagree.
  const int64_t interval = m.header.clock;  // kRegister: the node's heartbeat interval (0: not said)
  if (interval > 0 && interval > options_.heartbeat_timeout_ms / 2) {  // (2 * interval may overflow)
    Status st = Status::InvalidArgument(
        "this " + std::string(RoleName(role)) + " heartbeats every " + std::to_string(interval) +
        " ms, but the scheduler declares a node dead after " + std::to_string(options_.heartbeat_timeout_ms) +
        " ms of silence: its --heartbeat_interval_ms must be at most half the scheduler's --heartbeat_timeout_ms");
    PP_LOG(Error) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  const auto holder = std::find_if(list.begin(), list.end(), [&](const Node* o) { return o->rank == rank; });
  if (!replacement && rank >= 0 && holder != list.end()) {
    // A node asking for a rank an earlier registration holds is most likely that node restarted
    // (a Kubernetes pod, a Slurm task requeued) before the old one's heartbeat timeout, and the
    // rank its deployment gave it must stay its (its data shard, its checkpoint file). It takes
    // the rank; the one before is told why and dropped.
    PP_LOG(Warning) << "a " << RoleName(role) << " asked for rank " << rank << ", which an earlier registration "
                    << "holds; the new one takes it (a restart?) and the earlier one is dropped";
    DropRegistrant(**holder, Status::FailedPrecondition(
                                 "another " + std::string(RoleName(role)) + " registered asking for rank " +
                                 std::to_string(rank) + " before the job started (this one restarted, or two were "
                                 "given the same --rank): this one is dropped"));
  }
  if (!replacement && static_cast<int>(list.size()) >= want) {
    Status st = Status::FailedPrecondition("the job expects " + std::to_string(want) + " " + RoleName(role) +
                                           "s and has them all");
    PP_LOG(Warning) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  if (replacement) {
    RegisterReplacement(m);
    return;
  }
  // A node may ask for a rank (the launcher numbers its processes); otherwise the first free.
  std::vector<bool> held(want, false);
  for (Node* o : list) held[o->rank] = true;
  if (rank >= want) {  // (a deploy's task index and the job's size disagree: its data shard would be wrong)
    Status st = Status::InvalidArgument("asked for " + std::string(RoleName(role)) + " rank " + std::to_string(rank) +
                                        ", but the job has " + std::to_string(want) + " " + RoleName(role) +
                                        "s (ranks 0 to " + std::to_string(want - 1) + ")");
    PP_LOG(Error) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  if (rank < 0) {
    rank = 0;
    while (held[rank]) ++rank;
  }
  Node& n = nodes_[identity];
  n.role = role;
  n.identity = identity;
  n.address = m.header.address;
  n.rank = rank;
  n.register_request = m.header.request_id;
  n.last_seen_ms = NowMs();
  list.push_back(&n);
  PP_LOG(Info) << NodeName(n) << " registered (" << servers_.size() << "/" << options_.num_servers
               << " servers, " << workers_.size() << "/" << options_.num_workers << " workers)";
  if (static_cast<int>(servers_.size()) == options_.num_servers &&
      static_cast<int>(workers_.size()) == options_.num_workers) {
    registered_ = true;
    auto by_rank = [](const Node* a, const Node* b) { return a->rank < b->rank; };
    std::sort(servers_.begin(), servers_.end(), by_rank);
    std::sort(workers_.begin(), workers_.end(), by_rank);
    const Header h = RegisterReply();
    int64_t now = NowMs();
    for (auto& [id, node] : nodes_) {
      AnswerRegistration(node, h);
      node.last_seen_ms = now;
    }
    PP_LOG(Info) << "all nodes registered; job running";
  }
}

// The cluster map and membership every registering node is answered with.
Header SchedulerImpl::RegisterReply() const {
  Header h;
  h.type = MsgType::kRegisterReply;
  h.cluster.num_workers = options_.num_workers;
  for (Node* s : servers_) h.cluster.servers.push_back({s->rank, s->address});
  h.cluster.restore_from = restore_.dir;
  h.cluster.restore_run = restore_.run;
  h.cluster.start_clock = restore_.clock;
  h.cluster.checkpoints = !options_.checkpoint_dir.empty();
  h.cluster.survives_worker_death = options_.continue_on_worker_death || options_.wait_for_replacement;
  h.cluster.checkpoint_timeout_ms = options_.checkpoint_timeout_ms;
  h.membership = membership_;
  return h;
}

// A worker taking the place of a dead one (wait_for_replacement): the rank it asked for if that
// one is being replaced, else the lowest that is. It gets the cluster map as the first workers
// did; it learns its clock from the servers (each says where that rank's clock is).
void SchedulerImpl::RegisterReplacement(Message& m) {
  std::string identity(static_cast<const char*>(m.identity.data()), m.identity.size());
  int rank = m.header.sender_rank;
  if (!replacing_.count(rank)) rank = replacing_.begin()->first;
  replacing_.erase(rank);
  Node& n = nodes_[identity];
  n.role = Role::kWorker;
  n.identity = identity;
  n.rank = rank;
  n.register_request = m.header.request_id;
  n.last_seen_ms = NowMs();
  workers_[rank] = &n;  // the dead one's Node stays in nodes_, not alive
  membership_.worker_alive[rank] = Membership::kWorkerAlive;
  membership_.version++;
  membership_.reason = "worker " + std::to_string(rank) + " replaced";
  PP_LOG(Warning) << "worker " << rank << " replaced: a new worker took its place"
                  << (replacing_.empty() ? "" : "; " + std::to_string(replacing_.size()) + " more awaited");
  AnswerRegistration(n, RegisterReply());
  Broadcast();
}

bool SchedulerImpl::AnswerRegistration(Node& n, Header h) {
  h.sender_rank = n.rank;  // (its rank: the scheduler's own is implied)
  h.request_id = n.register_request;
  n.register_answered_ms = NowMs();
  return Send(n.identity, h);
}

void SchedulerImpl::HandleCreateTable(Message& m) {
  std::string identity(static_cast<const char*>(m.identity.data()), m.identity.size());
  Waiter w{identity, m.header.request_id};
  const TableSpec& spec = m.header.spec;
  Status st = spec.Validate();
  if (!st.ok()) {
    ReplyTo(w, MsgType::kCreateTableReply, st);
    return;
  }
  auto done = tables_.find(spec.name);
  if (done != tables_.end()) {
    if (done->second.spec == spec) ReplyTo(w, MsgType::kCreateTableReply, Status::OK(), &done->second);
    else
      ReplyTo(w, MsgType::kCreateTableReply,
              Status::AlreadyExists("table '" + spec.name + "' exists as " + done->second.spec.ToString() +
                                    "; asked for " + spec.ToString()));
    return;
  }
  auto pending = pending_tables_.find(spec.name);
  if (pending != pending_tables_.end()) {
    if (pending->second.info.spec == spec) pending->second.waiters.push_back(w);
    else
      ReplyTo(w, MsgType::kCreateTableReply,
              Status::AlreadyExists("table '" + spec.name + "' is being created with another spec"));
    return;
  }
  if (next_table_id_ >= TableInfo::kMaxTables && !failed_tables_.count(spec.name)) {
    ReplyTo(w, MsgType::kCreateTableReply,
            Status::ResourceExhausted("table '" + spec.name + "': this job has used all " +
                                      std::to_string(TableInfo::kMaxTables) + " table ids"));
    return;
  }
  PendingTable& p = pending_tables_[spec.name];
  // A creation tried before and failed (a server refused it or did not answer in time) may have
  // succeeded on some servers: the same table again is the same id, which those servers answer
  // at once, so that every server holds the table once (and a restored one holds its
  // checkpoint's rows, which a server reads into the first table of that name it creates).
  auto tried = failed_tables_.find(spec.name);
  p.info = tried != failed_tables_.end() && tried->second.spec == spec
               ? tried->second
               : TableInfo::Make(next_table_id_++, spec, options_.num_servers);
  p.waiters.push_back(w);
  p.deadline = Deadline::In(options_.table_timeout_ms);
  p.request_id = next_request_id_++;
  if (ResendDue(&p.resend_ms)) SendToServers(TableRequest(p), p.acked);
}

Header SchedulerImpl::TableRequest(const PendingTable& p) {
  Header h;
  h.type = MsgType::kCreateTable;
  h.request_id = p.request_id;
  h.info = p.info;
  return h;
}

void SchedulerImpl::HandleServerTableReply(Node& server, const Message& m) {
  for (auto it = pending_tables_.begin(); it != pending_tables_.end(); ++it) {
    PendingTable& p = it->second;
    if (p.request_id != m.header.request_id) continue;
    if (m.header.status != Code::kOk) {
      Status st = m.header.status_obj().Annotate("server " + std::to_string(server.rank) + " refused table '" + it->first + "'");
      for (auto& w : p.waiters) ReplyTo(w, MsgType::kCreateTableReply, st);
      failed_tables_[it->first] = p.info;
      pending_tables_.erase(it);
      return;
    }
    p.acked.insert(server.rank);
    if (static_cast<int>(p.acked.size()) == options_.num_servers) {
      PP_LOG(Info) << "table " << p.info.id << " " << p.info.spec.ToString() << " created";
      tables_[it->first] = p.info;
      failed_tables_.erase(it->first);
      for (auto& w : p.waiters) ReplyTo(w, MsgType::kCreateTableReply, Status::OK(), &p.info);
      pending_tables_.erase(it);
    }
    return;
  }
}

void SchedulerImpl::CheckPendingTables() {
  for (auto it = pending_tables_.begin(); it != pending_tables_.end();) {
    if (!it->second.deadline.Expired()) {
      if (ResendDue(&it->second.resend_ms)) SendToServers(TableRequest(it->second), it->second.acked);
      ++it;
      continue;
    }
    std::string missing;
    for (Node* s : servers_)
      if (!it->second.acked.count(s->rank)) missing += (missing.empty() ? "" : ", ") + NodeName(*s);
    Status st = Status::DeadlineExceeded("creating table '" + it->first + "': no answer within " +
                                         std::to_string(options_.table_timeout_ms) + " ms from " + missing);
    for (auto& w : it->second.waiters) ReplyTo(w, MsgType::kCreateTableReply, st);
    failed_tables_[it->first] = it->second.info;
    it = pending_tables_.erase(it);
  }
}

void SchedulerImpl::DropSilentRegistrants(int64_t now) {
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& n = it->second;
    if (now - n.last_seen_ms <= options_.heartbeat_timeout_ms) {
      ++it;
      continue;
    }
    PP_LOG(Warning) << NodeName(n) << " registered but sent no heartbeat for " << now - n.last_seen_ms
                    << " ms (timeout " << options_.heartbeat_timeout_ms
                    << " ms) before the job started: its slot is free again";
    // (Told, in case it is alive behind a stalled connection: it stops rather than wait.)
    ++it;  // (before n goes)
    DropRegistrant(n, Status::Aborted("no heartbeat reached the scheduler for " +
                                          std::to_string(now - n.last_seen_ms) +
                                          " ms while this node waited for the job to start: its slot was given up"));
  }
}

void SchedulerImpl::DropRegistrant(const Node& n, const Status& why) {
  ReplyTo(Waiter{n.identity, n.register_request}, MsgType::kRegisterReply, why);
  auto& list = n.role == Role::kServer ? servers_ : workers_;
  list.erase(std::remove(list.begin(), list.end(), &n), list.end());
  const std::string identity = n.identity;  // (a key inside the node being erased)
  nodes_.erase(identity);
}

void SchedulerImpl::CheckLiveness(int64_t now) {
  bool changed = false;
  for (auto& [id, n] : nodes_) {
    const bool left = !n.left.ok();
    if (!n.alive || n.done || (!left && now - n.last_seen_ms <= options_.heartbeat_timeout_ms)) continue;
    n.alive = false;
    changed = true;
    std::string why = left ? NodeName(n) + " stopped: " + n.left.ToString()
                           : NodeName(n) + " sent no heartbeat for " + std::to_string(now - n.last_seen_ms) +
                                 " ms (timeout " + std::to_string(options_.heartbeat_timeout_ms) + " ms)";
    n.death = why;
    PP_LOG(Error) << why << ": declared dead";
    if (n.role == Role::kServer) {
      membership_.server_alive[n.rank] = 0;
      // A server's setup (its flags, a checkpoint it cannot restore from) fails the same way again:
      // pushpull-scheduler exits 2 for it, not restarted.
      if (IsSetupError(n.left.code())) end_code_ = n.left.code();
      else if (n.left.code() == Code::kCorruption) end_code_ = Code::kInvalidArgument;
      End(Membership::kAborted, why + "; a job cannot go on without a server");
      return;
    }
    if (IsSetupError(n.left.code())) {
      // A worker's bad flags or setup (a missing file, a full table) end the job whatever
      // --on_worker_death: a worker in its place, started with the same flags, or the others,
      // would stop the same way. Run() says so in its code, and pushpull-scheduler exits 2.
      membership_.worker_alive[n.rank] = Membership::kWorkerDead;
      end_code_ = n.left.code();
      End(Membership::kAborted, why + " (a setup error: the job ends whatever --on_worker_death)");
      return;
    }
    barrier_.erase(n.rank);
    // Its ask for a checkpoint goes with it: a replacement in its place is another worker, which
    // asks for itself (it catches up on the checkpoint due at the clock it starts at: apps/app.cc).
    checkpoint_.workers.erase(n.rank);
    if (options_.wait_for_replacement || options_.continue_on_worker_death) {
      // Dying first: the servers say where its clock is (SettleDying).
      membership_.worker_alive[n.rank] = Membership::kWorkerDying;
      dying_[n.rank] = Dying{membership_.version + 1, Deadline::In(options_.heartbeat_timeout_ms)};
      continue;
    }
    membership_.worker_alive[n.rank] = Membership::kWorkerDead;
    End(Membership::kAborted, left ? why
                                   : why + " (run with --on_worker_death=continue to go on without it, or =wait "
                                           "to wait for a replacement)");
    return;
  }
  for (auto& [rank, deadline] : replacing_) {
    if (!deadline.Expired()) continue;
    End(Membership::kAborted, "worker " + std::to_string(rank) + " died and no worker took its place within " +
                                  std::to_string(options_.replacement_timeout_ms) + " ms (--replacement_timeout_s)");
    return;
  }
  if (changed) {
    if (LiveWorkers() == 0 && !options_.wait_for_replacement) {
      End(Membership::kAborted, "every worker has died");
      return;
    }
    AnnounceWorkerDeaths("worker died; asking the servers where its clock is");
  }
  SettleDying(/*decide_without_missing=*/true);
}

int SchedulerImpl::LiveWorkers() const {
  int live = 0;
  for (const Node* w : workers_) live += w->alive;
  return live;
}

void SchedulerImpl::AnnounceWorkerDeaths(const std::string& reason) {
  membership_.version++;
  membership_.reason = reason;
  Broadcast();
  CheckBarrier();
  CheckCheckpoint();
  CheckDone();
}

void SchedulerImpl::HandleWorkerClocks(const Node& server, const Message& m) {
  ClocksReport& r = clocks_reports_[server.rank];
  const uint64_t version = m.header.clock > 0 ? uint64_t(m.header.clock) : 0;
  if (version < r.version) return;  // (an older one, overtaken)
  r.version = version;
  r.clocks = m.header.worker_clocks;
  r.settled = m.header.worker_settled;
  SettleDying(/*decide_without_missing=*/false);
}

void SchedulerImpl::SettleDying(bool decide_without_missing) {
  if (dying_.empty() || membership_.job_state != Membership::kRunning) return;
  bool changed = false;
  for (auto it = dying_.begin(); it != dying_.end();) {
    const int w = it->first;
    const Dying& d = it->second;
    std::string missing;
    int64_t highest = std::numeric_limits<int64_t>::min(), lowest = std::numeric_limits<int64_t>::max();
    bool settled = false;
    for (Node* s : servers_) {
      if (!s->alive) continue;
      auto r = clocks_reports_.find(s->rank);
      if (r == clocks_reports_.end() || r->second.version < d.version || static_cast<size_t>(w) >= r->second.clocks.size()) {
        missing += (missing.empty() ? "" : ", ") + NodeName(*s);
        continue;
      }
      const int64_t c = r->second.clocks[w];
      const bool s_settled = r->second.settled[w] != 0;
      lowest = std::min(lowest, c);
      if (c > highest) highest = c, settled = s_settled;
      else if (c == highest) settled = settled || s_settled;
    }
    if (!missing.empty() && (!decide_without_missing || !d.deadline.Expired())) {
      ++it;
      continue;
    }
    if (!missing.empty())
      PP_LOG(Warning) << "worker " << w << " died: no word from " << missing << " on where its clock is within "
                      << options_.heartbeat_timeout_ms << " ms; deciding without " << (missing.find(',') == std::string::npos ? "it" : "them");
    int64_t agreed = -1;
    if (highest > lowest && settled) {
      // Its last Clock() went out once all it had pushed was answered: the servers it did not
      // reach hold every push of the clocks it closed, and count them as the others do.
      agreed = highest;
      PP_LOG(Warning) << "worker " << w << " died between its Clock() messages: it reached clock " << highest
                      << " on some servers and " << lowest << " on others; every server counts it at " << highest;
    } else if (highest > lowest) {
      PP_LOG(Warning) << "worker " << w << " died between its Clock() messages (clock " << highest << " on some servers, "
                      << lowest << " on others), which carried no push to a BSP table: each server keeps its own";
    }
    membership_.worker_last_clock[w] = agreed;
    if (options_.wait_for_replacement) {
      membership_.worker_alive[w] = Membership::kWorkerReplacing;
      replacing_.insert_or_assign(w, Deadline::In(options_.replacement_timeout_ms));
      PP_LOG(Warning) << "waiting up to " << options_.replacement_timeout_ms << " ms for a worker to take rank " << w
                      << " (pushpull-worker --rank=" << w << "); the others wait for its clock";
    } else {
      membership_.worker_alive[w] = Membership::kWorkerDead;
    }
    it = dying_.erase(it);
    changed = true;
  }
  if (!changed) return;
  AnnounceWorkerDeaths(options_.wait_for_replacement ? "worker died; waiting for its replacement"
                                                     : "worker died; continuing with " + Count(LiveWorkers(), "worker"));
}

void SchedulerImpl::CheckBarrier() {
  if (barrier_.empty()) return;
  for (Node* w : workers_)
    if ((w->alive || Replacing(w->rank)) && !w->done && !barrier_.count(w->rank)) return;
  for (auto& [rank, waiter] : barrier_) ReplyTo(waiter, MsgType::kBarrierReply, Status::OK());
  barrier_.clear();
}

void SchedulerImpl::HandleCheckpoint(Node& worker, const Message& m) {
  Waiter w{worker.identity, m.header.request_id};
  if (options_.checkpoint_dir.empty()) {
    ReplyTo(w, MsgType::kCheckpointReply,
            Status::FailedPrecondition("the scheduler has no --checkpoint_dir: checkpoints are off"));
    return;
  }
  if (m.header.clock <= committed_clock_) {
    PP_LOG(Info) << "worker " << worker.rank << " asked for a checkpoint at clock " << m.header.clock
                 << ": already taken (the newest is at clock " << committed_clock_ << ")";
    ReplyTo(w, MsgType::kCheckpointReply, Status::OK());
    return;
  }
  if (m.header.address.size() > kMaxRunText || m.header.address.find('\n') != std::string::npos) {
    ReplyTo(w, MsgType::kCheckpointReply,
            Status::InvalidArgument("a run's description must be one line of at most " + std::to_string(kMaxRunText) +
                                    " bytes"));
    return;
  }
  if (checkpoint_.writing && !checkpoint_.workers.count(worker.rank) && m.header.clock == checkpoint_.clock &&
      m.header.address == checkpoint_.run) {
    // A worker that asks for the checkpoint being written, having not asked before: the
    // replacement of one that asked and died meanwhile (it catches up on the checkpoint due at
    // the clock it starts at). It is answered with the others, at the commit.
    PP_LOG(Info) << "worker " << worker.rank << " joins the checkpoint at clock " << checkpoint_.clock
                 << " being written";
    checkpoint_.workers[worker.rank] = {w, m.header.clock, m.header.address};
    return;
  }
  if (checkpoint_.writing || checkpoint_.workers.count(worker.rank)) {
    ReplyTo(w, MsgType::kCheckpointReply,
            Status::FailedPrecondition("worker " + std::to_string(worker.rank) +
                                       " asked for a checkpoint while one is in progress"));
    return;
  }
  if (checkpoint_.workers.empty()) checkpoint_.deadline = Deadline::In(options_.checkpoint_timeout_ms);
  checkpoint_.workers[worker.rank] = {w, m.header.clock, m.header.address};
  CheckCheckpoint();
}

// Once every live worker has asked: the same clock from all, then every server writes.
void SchedulerImpl::CheckCheckpoint() {
  if (checkpoint_.workers.empty() || checkpoint_.writing) return;
  for (Node* w : workers_)
    if ((w->alive || Replacing(w->rank)) && !w->done && !checkpoint_.workers.count(w->rank)) return;
  for (auto it = checkpoint_.workers.begin(); it != checkpoint_.workers.end();) {
    if (!workers_[it->first]->alive) it = checkpoint_.workers.erase(it);  // died while waiting
    else ++it;
  }
  if (checkpoint_.workers.empty()) return;
  std::string clocks;
  std::set<int64_t> distinct;
  std::set<std::string> runs;
  for (auto& [rank, wc] : checkpoint_.workers) {
    runs.insert(wc.run);
    distinct.insert(wc.clock);
    clocks += (clocks.empty() ? "" : ", ") + std::string("worker ") + std::to_string(rank) + " at " +
              std::to_string(wc.clock);
  }
  if (distinct.size() != 1) {
    FailCheckpoint(Status::InvalidArgument("workers asked for a checkpoint at different clocks (" + clocks +
                                           "): every worker must call Checkpoint() at the same clock"));
    return;
  }
  if (runs.size() != 1) {
    std::string all;
    for (const auto& r : runs) all += (all.empty() ? "'" : ", '") + r + "'";
    FailCheckpoint(Status::InvalidArgument("workers describe their runs differently (" + all +
                                           "): every worker must run the same app with the same data and flags"));
    return;
  }
  checkpoint_.run = *runs.begin();
  const std::string dir = CheckpointDir(options_.checkpoint_dir, *distinct.begin());
  Status prepared = PrepareCheckpointDir(
      options_.checkpoint_dir, dir,
      committed_clock_ >= 0 ? CheckpointDir(options_.checkpoint_dir, committed_clock_) : std::string());
  if (!prepared.ok()) {
    FailCheckpoint(prepared);
    return;
  }
  checkpoint_.clock = *distinct.begin();
  checkpoint_.dir = dir;
  checkpoint_.writing = true;
  checkpoint_.written.clear();
  checkpoint_.request_id = next_request_id_++;
  checkpoint_.deadline = Deadline::In(options_.checkpoint_timeout_ms);
  checkpoint_.started_ms = NowMs();
  PP_LOG(Info) << "checkpoint at clock " << checkpoint_.clock << ": servers writing into " << checkpoint_.dir;
  checkpoint_.resend_ms = 0;
  if (ResendDue(&checkpoint_.resend_ms)) SendToServers(CheckpointRequest(), checkpoint_.written);
}

Header SchedulerImpl::CheckpointRequest() const {
  Header h;
  h.type = MsgType::kCheckpoint;
  h.request_id = checkpoint_.request_id;
  h.clock = checkpoint_.clock;
  h.address = checkpoint_.dir;
  return h;
}

void SchedulerImpl::HandleServerCheckpointReply(Node& server, const Message& m) {
  if (!checkpoint_.writing || m.header.request_id != checkpoint_.request_id) return;
  if (m.header.status != Code::kOk) {
    FailCheckpoint(m.header.status_obj().Annotate("checkpoint at clock " + std::to_string(checkpoint_.clock) +
                                                  ": " + NodeName(server)));
    return;
  }
  checkpoint_.written.insert(server.rank);
  if (static_cast<int>(checkpoint_.written.size()) < options_.num_servers) return;
  CheckpointManifest man;
  man.clock = checkpoint_.clock;
  man.servers = options_.num_servers;
  man.workers = options_.num_workers;
  man.dir = checkpoint_.dir;
  man.run = checkpoint_.run;
  Status st = CommitCheckpoint(options_.checkpoint_dir, man, options_.checkpoint_keep);
  if (!st.ok()) {
    FailCheckpoint(st.Annotate("checkpoint at clock " + std::to_string(checkpoint_.clock)));
    return;
  }
  PP_LOG(Info) << "checkpoint at clock " << checkpoint_.clock << " complete: " << checkpoint_.dir << " ("
               << NowMs() - checkpoint_.started_ms << " ms)";
  for (auto& [rank, wc] : checkpoint_.workers) ReplyTo(wc.waiter, MsgType::kCheckpointReply, Status::OK());
  committed_clock_ = checkpoint_.clock;
  ++checkpoints_committed_;
  checkpoint_ = PendingCheckpoint();
}

void SchedulerImpl::FailCheckpoint(const Status& st) {
  if (checkpoint_.workers.empty() && !checkpoint_.writing) return;
  PP_LOG(Error) << "checkpoint failed: " << st.ToString();
  for (auto& [rank, wc] : checkpoint_.workers) ReplyTo(wc.waiter, MsgType::kCheckpointReply, st);
  checkpoint_ = PendingCheckpoint();
}

void SchedulerImpl::CheckDone() {
  if (membership_.job_state != Membership::kRunning) return;
  int live = 0, dead = 0;
  for (Node* w : workers_) {
    if ((w->alive || Replacing(w->rank)) && !w->done) return;
    (w->alive ? live : dead)++;
  }
  End(Membership::kFinished, Count(live, "worker") + " finished" +
                                 (dead ? ", " + std::to_string(dead) + " died" : ""));
}

void SchedulerImpl::Broadcast() {
  Header h;
  h.type = MsgType::kMembership;
  h.membership = membership_;
  for (auto& [id, n] : nodes_) {
    if (!n.alive) continue;
    // A node the end did not reach is told when it next heartbeats, within the end's grace period.
    if (Send(id, h) && membership_.job_state != Membership::kRunning) n.told_end = true;
  }
}

void SchedulerImpl::PublishMetrics() {
  std::lock_guard<std::mutex> l(metrics_mu_);
  MetricsSnapshot& s = metrics_snapshot_;
  s.membership = membership_;
  s.registered = registered_;
  s.servers_registered = servers_.size();
  s.workers_registered = workers_.size();
  s.tables = tables_.size();
  s.barrier_waiting = barrier_.size();
  s.committed_clock = committed_clock_;
  s.checkpoints = checkpoints_committed_;
}

std::string SchedulerImpl::RenderMetrics() const {
  MetricsSnapshot s;
  {
    std::lock_guard<std::mutex> l(metrics_mu_);
    s = metrics_snapshot_;
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
    if (w < mem.worker_done.size() && mem.worker_done[w]) ++finished;
    else if (mem.worker_alive[w] == Membership::kWorkerAlive) ++live;
    else if (mem.worker_alive[w] == Membership::kWorkerDying) ++dying;
    else if (mem.worker_alive[w] == Membership::kWorkerReplacing) ++replacing;
    else ++dead;
  }
  const std::pair<const char*, size_t> workers[] = {
      {"live", live}, {"dying", dying}, {"awaiting_replacement", replacing}, {"dead", dead}, {"finished", finished}};
  for (auto [state, n] : workers)
    m.Gauge("pushpull_job_workers", "Workers by state (live, dying, awaiting_replacement, dead, finished).", double(n),
            {{"state", state}});
  m.Gauge("pushpull_job_workers_expected", "--num_workers.", options_.num_workers);
  size_t servers_alive = 0;
  for (size_t i = 0; s.registered && i < mem.server_alive.size(); ++i) servers_alive += mem.server_alive[i] != 0;
  m.Gauge("pushpull_job_servers_alive", "Servers alive.", double(servers_alive));
  m.Gauge("pushpull_job_servers_expected", "--num_servers.", options_.num_servers);
  m.Gauge("pushpull_job_membership_version", "Changes with every death, replacement and finish.", double(mem.version));
  m.Gauge("pushpull_job_tables", "Tables created.", double(s.tables));
  m.Gauge("pushpull_job_barrier_waiting", "Workers waiting in a barrier now.", double(s.barrier_waiting));
  m.Counter("pushpull_job_checkpoints_total", "Checkpoints committed by this scheduler.", double(s.checkpoints));
  m.Gauge("pushpull_job_checkpoint_clock", "The clock of the newest committed checkpoint (-1: none).",
          double(s.committed_clock));
  return m.str();
}

void SchedulerImpl::End(Membership::JobState state, const std::string& reason) {
  if (membership_.job_state != Membership::kRunning) return;
  membership_.job_state = state;
  membership_.reason = reason;
  membership_.version++;
  for (auto& [id, n] : nodes_) n.told_end = false;
  Broadcast();
  // Workers that finished before were answered then, and may have exited since: nothing to tell.
  for (auto& [id, n] : nodes_)
    if (n.done) n.told_end = true;
  // Give nodes that missed the broadcast a heartbeat's chance to hear it.
  end_deadline_ms_ = NowMs() + std::min(options_.heartbeat_timeout_ms, 2000);
  // Pending callers learn why.
  Status st = Status::Aborted("job ended: " + reason);
  for (auto& [rank, w] : barrier_) ReplyTo(w, MsgType::kBarrierReply, st);
  barrier_.clear();
  FailCheckpoint(st);
  for (auto& [name, p] : pending_tables_)
    for (auto& w : p.waiters) ReplyTo(w, MsgType::kCreateTableReply, st);
  pending_tables_.clear();
}

}  // namespace

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options) {
  if (options.num_servers < 1 || options.num_workers < 1)
    return Status::InvalidArgument("need at least one server and one worker");
  if (options.num_servers > 4096 || options.num_workers > 4096)
    return Status::InvalidArgument("at most 4096 servers and 4096 workers");
  if (options.port < 0 || options.port > 65535)
    return Status::InvalidArgument("port " + std::to_string(options.port) + " must be in [0, 65535] (0: any free port)");
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

}  // namespace pushpull
