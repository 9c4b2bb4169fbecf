// The scheduler's shared job state (server/scheduler/scheduler.h): the nodes that registered and their
// ranks, the membership every node is told, and the messages to them, with each worker's answers
// recorded so that a request asked again is answered from the record, never run twice. The parts
// (scheduler_registration.h, scheduler_liveness.h, scheduler_tables.h, scheduler_checkpoints.h)
// read and change it; the class composing them (scheduler.cc) owns the socket the messages go
// out on (Outbox) and what ends the job (Events).
//
// Threading: the state and every part are touched only by the thread in Scheduler::Run() (and,
// before Run(), by the thread that creates the scheduler and calls PrepareRestore()). Nothing
// here is locked: the metrics thread reads a snapshot the loop publishes (scheduler_metrics.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "common/wire.h"
#include "pushpull/status.h"
#include "server/scheduler/scheduler.h"

namespace pushpull::scheduler {

struct Node {
  Role role = Role::kWorker;
  int rank = -1;
  std::string identity;  // its routing identity: the key it has in State::nodes
  std::string address;
  bool alive = true;
  bool done = false;
  Status left;             // why it stopped early, as it said (Client::Leave; a server stopped mid-job)
                           // or as the launcher that started it saw it exit (kNodeExited)
  int64_t left_ms = 0;     // when `left` was heard: the first death is the job's cause
  bool exited = false;     // `left` came from the launcher: the process is gone
  std::string death;       // why it was declared dead (alive false)
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

// "worker 3 (host:port)": how logs and errors name a node.
std::string NodeName(const Node& n);

// A request waiting for its answer: who asked, and the request id the answer carries.
struct Waiter {
  std::string identity;
  uint64_t request_id;
};

// Where the parts' messages go out: the scheduler's one socket (scheduler.cc).
class Outbox {
 public:
  virtual ~Outbox() = default;
  // Sends h to the peer with this routing identity, as the scheduler. False when the transport
  // refused it (the peer is gone).
  virtual bool Send(const std::string& identity, Header h) = 0;
};

// What a part asks of the scheduler as a whole (scheduler.cc).
class Events {
 public:
  virtual ~Events() = default;
  // Ends the job (the first call; later ones do nothing): every live node is told, and every
  // request waiting is answered with why.
  virtual void End(Membership::JobState state, const std::string& reason) = 0;
  // Worker `rank` was declared dead: its barrier wait and its checkpoint ask go with it.
  virtual void WorkerGone(int rank) = 0;
  // The workers' states changed (a death, a finish): what waits on them (a barrier, a
  // checkpoint, the job's end) is looked at again.
  virtual void WorkersChanged() = 0;
};

// The loop thread's job state: what the parts share, open to them all, with the messaging they
// all use. Each part keeps what only it uses.
class State {
 public:
  State(const SchedulerOptions& o, Outbox* out) : options(o), out_(out) {}
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  const SchedulerOptions& options;
  // By identity. A replaced worker's Node stays, not alive: it is told so if it calls.
  std::map<std::string, Node> nodes;
  // Pointers into `nodes`, by rank once the job started (before: in registration order).
  std::vector<Node*> servers, workers;
  bool registered = false;  // every node registered: the job is running
  Membership membership;
  Code end_code = Code::kAborted;  // Run()'s code when the job is aborted

  // An id for a request to the servers (a table creation, a checkpoint write).
  uint64_t NextRequestId() { return next_request_id_++; }

  bool Send(const std::string& identity, const Header& h) { return out_->Send(identity, h); }
  // Sends the membership as it is now; false as Send.
  bool SendMembership(const std::string& identity);
  // The membership to every live node; once the job ended, a node it reached counts as told.
  void Broadcast();
  // Answers a waiting request, recording the answer for a repeat of the request (a worker's).
  void ReplyTo(const Waiter& w, MsgType type, const Status& st, const TableInfo* info = nullptr);
  // A request of worker n seen before: answers it from the record (nothing while it is in
  // progress) and returns true; false for a new one.
  bool AnswerRepeat(const Node& n, const Header& req);
  // The answer's type of a worker's request the scheduler answers; nothing for other messages.
  static std::optional<MsgType> ReplyTypeOf(MsgType request);

  // A request to the servers (a table creation, a checkpoint write) that some have not answered
  // is sent again to those every resend interval, in case it or the answer went with a dropped
  // connection (servers answer a repeat without running it twice). ResendDue: true, and the next
  // time set, when it is due (first: at once).
  bool ResendDue(int64_t* resend_ms) const;
  // To every server whose rank is not in `answered`.
  void SendToServers(const Header& h, const std::set<int>& answered);
  // A third of the heartbeat timeout, at most a second: a few small messages while a request is
  // open, to the servers that have not answered it.
  int64_t ResendIntervalMs() const { return std::clamp(options.heartbeat_timeout_ms / 3, 100, 1000); }

 private:
  Outbox* const out_;
  uint64_t next_request_id_ = 1;
};

}  // namespace pushpull::scheduler
