#include "server/scheduler/registration.h"

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "common/time.h"

namespace pushpull::scheduler {

void Registration::Start() { start_ms_ = NowMs(); }

void Registration::HandleRegister(const std::string& identity, const Header& h) {
  const Membership& membership = state_.membership;
  const bool registered = state_.registered;
  Role role = h.sender_role;
  Waiter w{identity, h.request_id};
  // A worker taking a dead one's place in a running job (wait_for_replacement).
  // (One that asks for a rank takes that rank's place only: a deployment's rank stays its node's.)
  const int asked = h.sender_rank;
  const bool replacement = registered && role == Role::kWorker && liveness_.HasVacancy() &&
                           !state_.nodes.count(identity) && membership.job_state == Membership::kRunning &&
                           (asked < 0 || liveness_.Vacant(asked));
  if (!replacement && (role == Role::kScheduler || registered || state_.nodes.count(identity))) {
    // Under --on_worker_death=wait a worker may come before the one it replaces is declared dead
    // (an orchestrator restarting it at once): Unavailable, which it asks again on until its
    // registration deadline.
    const bool early = registered && options_.wait_for_replacement && role == Role::kWorker &&
                       membership.job_state == Membership::kRunning && !state_.nodes.count(identity) &&
                       asked < options_.num_workers;
    Status st = early ? Status::Unavailable((asked >= 0 ? "rank " + std::to_string(asked) + " is held"
                                                        : std::string("the job is running with all its workers")) +
                                            ": a new worker takes a dead one's place once the scheduler has declared "
                                            "it dead (after --heartbeat_timeout_ms of silence)")
                      : Status::FailedPrecondition(!registered ? "bad registration"
                                                               : "the job is already running with all its nodes");
    if (registered && !early) PP_LOG(Warning) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    if (early && told_not_yet_.insert(identity).second)  // (it asks again every 250 ms: said once)
      PP_LOG(Warning) << "a worker" << (asked >= 0 ? " for rank " + std::to_string(asked) : std::string())
                      << " came before a rank is free: told to ask again";
    state_.ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  auto& list = role == Role::kServer ? state_.servers : state_.workers;
  int want = role == Role::kServer ? options_.num_servers : options_.num_workers;
  int rank = h.sender_rank;  // a node may ask for one (a deployment's task index)
  if (role == Role::kServer && h.address.empty()) {
    state_.ReplyTo(w, MsgType::kRegisterReply, Status::InvalidArgument("a server must give its address"));
    return;
  }
  // A node that heartbeats less than twice per timeout would be declared dead between two
  // heartbeats, over and over: refused at once, saying which two settings disagree.
  const int64_t interval = h.clock;  // kRegister: the node's heartbeat interval (0: not said)
  if (interval > 0 && interval > options_.heartbeat_timeout_ms / 2) {  // (2 * interval may overflow)
    Status st = Status::InvalidArgument(
        "this " + std::string(RoleName(role)) + " heartbeats every " + std::to_string(interval) +
        " ms, but the scheduler declares a node dead after " + std::to_string(options_.heartbeat_timeout_ms) +
        " ms of silence: its --heartbeat_interval_ms must be at most half the scheduler's "
        "--heartbeat_timeout_ms");
    PP_LOG(Error) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    state_.ReplyTo(w, MsgType::kRegisterReply, st);
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
    DropRegistrant(**holder, Status::FailedPrecondition("another " + std::string(RoleName(role)) +
                                                        " registered asking for rank " + std::to_string(rank) +
                                                        " before the job started (this one restarted, or two were "
                                                        "given the same --rank): this one is dropped"));
  }
  if (!replacement && static_cast<int>(list.size()) >= want) {
    Status st = Status::FailedPrecondition("the job expects " + std::to_string(want) + " " + RoleName(role) +
                                           "s and has them all");
    PP_LOG(Warning) << "refused a " << RoleName(role) << "'s registration: " << st.message();
    state_.ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  if (replacement) {
    RegisterReplacement(identity, h);
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
    state_.ReplyTo(w, MsgType::kRegisterReply, st);
    return;
  }
  if (rank < 0) {
    rank = 0;
    while (held[rank]) ++rank;
  }
  Node& n = state_.nodes[identity];
  n.role = role;
  n.identity = identity;
  n.address = h.address;
  n.rank = rank;
  n.register_request = h.request_id;
  n.last_seen_ms = NowMs();
  list.push_back(&n);
  PP_LOG(Info) << NodeName(n) << " registered (" << state_.servers.size() << "/" << options_.num_servers << " servers, "
               << state_.workers.size() << "/" << options_.num_workers << " workers)";
  if (static_cast<int>(state_.servers.size()) == options_.num_servers &&
      static_cast<int>(state_.workers.size()) == options_.num_workers) {
    state_.registered = true;
    auto by_rank = [](const Node* a, const Node* b) { return a->rank < b->rank; };
    std::sort(state_.servers.begin(), state_.servers.end(), by_rank);
    std::sort(state_.workers.begin(), state_.workers.end(), by_rank);
    const Header reply = RegisterReply();
    int64_t now = NowMs();
    for (auto& [id, node] : state_.nodes) {
      AnswerRegistration(node, reply);
      node.last_seen_ms = now;
    }
    PP_LOG(Info) << "all nodes registered; job running";
  }
}

Header Registration::RegisterReply() const {
  Header h;
  h.type = MsgType::kRegisterReply;
  h.cluster.num_workers = options_.num_workers;
  for (Node* s : state_.servers) h.cluster.servers.push_back({s->rank, s->address});
  h.cluster.restore_from = restore_.dir;
  h.cluster.restore_run = restore_.run;
  h.cluster.start_clock = restore_.clock;
  h.cluster.checkpoints = !options_.checkpoint_dir.empty();
  h.cluster.survives_worker_death = options_.continue_on_worker_death || options_.wait_for_replacement;
  h.cluster.checkpoint_timeout_ms = options_.checkpoint_timeout_ms;
  h.membership = state_.membership;
  return h;
}

// The rank it asked for if that one is vacant, else the lowest that is. It gets the cluster map
// as the first workers did; it learns its clock from the servers (each says where that rank's
// clock is).
void Registration::RegisterReplacement(const std::string& identity, const Header& h) {
  const int rank = liveness_.FillVacancy(h.sender_rank);
  Node& n = state_.nodes[identity];
  n.role = Role::kWorker;
  n.identity = identity;
  n.rank = rank;
  n.register_request = h.request_id;
  n.last_seen_ms = NowMs();
  state_.workers[rank] = &n;  // the dead one's Node stays in nodes, not alive
  state_.membership.worker_alive[rank] = Membership::kWorkerAlive;
  state_.membership.version++;
  state_.membership.reason = "worker " + std::to_string(rank) + " replaced";
  PP_LOG(Warning) << "worker " << rank << " replaced: a new worker took its place"
                  << (!liveness_.HasVacancy() ? "" : "; " + std::to_string(liveness_.vacancies()) + " more awaited");
  AnswerRegistration(n, RegisterReply());
  state_.Broadcast();
}

bool Registration::AnswerRegistration(Node& n, Header h) {
  h.sender_rank = n.rank;  // (its rank: the scheduler's own is implied)
  h.request_id = n.register_request;
  n.register_answered_ms = NowMs();
  return state_.Send(n.identity, h);
}

void Registration::AnswerAgain(Node& n) {
  // (Not for a heartbeat that crossed the answer: one a second after it, at most.)
  if (NowMs() - n.register_answered_ms >= 1000 && AnswerRegistration(n, RegisterReply()))
    PP_LOG(Warning) << NodeName(n) << " has not heard that it registered: told again";
}

void Registration::HandleWaitingHeartbeat(const std::string& identity) {
  auto it = state_.nodes.find(identity);
  if (it != state_.nodes.end() && state_.membership.job_state == Membership::kRunning) {
    it->second.last_seen_ms = NowMs();
  } else if (it != state_.nodes.end()) {
    // The job ended before it started (registration timed out): it hears so.
    state_.SendMembership(identity);
  } else {
    // A node waiting for a registration this scheduler no longer holds: it hears so, once a beat.
    PP_LOG(Debug) << "a heartbeat from a node whose registration is not held here";
    state_.ReplyTo(Waiter{identity, 0}, MsgType::kRegisterReply,
                   Status::Aborted("the scheduler holds no registration of this node (dropped for its silence, or "
                                   "lost with a connection): start it again"));
  }
}

void Registration::CheckDeadline() {
  if (state_.registered || NowMs() - start_ms_ <= options_.register_timeout_ms) return;
  int s = 0, w = 0;
  for (auto& [id, n] : state_.nodes) (n.role == Role::kServer ? s : w)++;
  events_.End(Membership::kAborted, "registration timed out after " + std::to_string(options_.register_timeout_ms) +
                                        " ms: " + std::to_string(s) + "/" + std::to_string(options_.num_servers) +
                                        " servers and " + std::to_string(w) + "/" +
                                        std::to_string(options_.num_workers) + " workers registered");
}

void Registration::DropSilentRegistrants(int64_t now) {
  for (auto it = state_.nodes.begin(); it != state_.nodes.end();) {
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
    DropRegistrant(n, Status::Aborted("no heartbeat reached the scheduler for " + std::to_string(now - n.last_seen_ms) +
                                      " ms while this node waited for the job to start: its slot was given up"));
  }
}

void Registration::DropRegistrant(const Node& n, const Status& why) {
  state_.ReplyTo(Waiter{n.identity, n.register_request}, MsgType::kRegisterReply, why);
  auto& list = n.role == Role::kServer ? state_.servers : state_.workers;
  list.erase(std::remove(list.begin(), list.end(), &n), list.end());
  const std::string identity = n.identity;  // (a key inside the node being erased)
  state_.nodes.erase(identity);
}

}  // namespace pushpull::scheduler
