#include "common/control.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/address.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/time.h"

namespace pushpull {

Status ControlOptions::Validate() const {
  if (heartbeat_interval_ms < 1)
    return Status::InvalidArgument("heartbeat_interval_ms must be at least 1, not " +
                                   std::to_string(heartbeat_interval_ms));
  if (scheduler_timeout_ms <= heartbeat_interval_ms)
    return Status::InvalidArgument("scheduler_timeout_ms (" + std::to_string(scheduler_timeout_ms) +
                                   ") must be above heartbeat_interval_ms (" + std::to_string(heartbeat_interval_ms) +
                                   ")");
  if (register_timeout_ms < 1)
    return Status::InvalidArgument("register_timeout_ms must be at least 1, not " +
                                   std::to_string(register_timeout_ms));
  if (connect_timeout_ms < 1)
    return Status::InvalidArgument("connect_timeout_ms must be at least 1, not " + std::to_string(connect_timeout_ms));
  return Status::OK();
}

ControlChannel::ControlChannel(Transport& transport, Role role, ControlOptions options)
    : role_(role), options_(std::move(options)), transport_(transport) {
  SocketOptions so;
  so.max_msg_bytes = 16 << 20;
  // The scheduler knows a node by its routing id. Left to ZeroMQ, a reconnect (a network blip)
  // would bring a new random one, whose heartbeats the scheduler would ignore until it declared
  // the node dead; a fixed one, unique to this channel, survives reconnects.
  so.routing_id = RandomRoutingId(RoleName(role));
  Result<std::unique_ptr<Socket>> sock = transport_.MakeSocket(SocketKind::kDealer, so);
  if (sock.ok()) {
    sock_ = std::move(*sock);
  } else {
    made_ = sock.status().Annotate("the scheduler's connection");
  }
}

Status ControlChannel::Send(Header h) {
  h.sender_role = role_;
  h.sender_rank = rank_;
  if (!sock_) return made_;
  return SendMessage(*sock_, nullptr, h);
}

Status ControlChannel::Register(const std::string& address) {
  if (!sock_) return made_;
  if (Status st = sock_->Connect(options_.scheduler); !st.ok())
    return Status::InvalidArgument("scheduler address '" + options_.scheduler + "': " + st.message() +
                                   " (expected tcp://HOST:PORT)");
  const Deadline deadline = Deadline::In(options_.register_timeout_ms);
  PP_RETURN_IF_ERROR(WaitUntilReachable(deadline));
  Header h;
  h.type = MsgType::kRegister;
  h.address = address;
  h.sender_role = role_;
  h.sender_rank = options_.requested_rank;
  h.clock = options_.heartbeat_interval_ms;  // checked against the scheduler's timeout
  // Looked up once, before registering: the lookup blocks, and a slow resolver in the loop below
  // would hold its heartbeats back past the scheduler's timeout.
  const std::string unresolved_note = UnresolvedHostNote(options_.scheduler);
  PP_RETURN_IF_ERROR(SendMessage(*sock_, nullptr, h));
  PP_LOG(Info) << "registering with the scheduler at " << options_.scheduler << " (waiting up to "
               << options_.register_timeout_ms / 1000.0 << " s for it and for the job's other nodes)";
  int64_t next_note = NowMs() + 10000;
  // Heartbeats while waiting: the scheduler frees the slot of a node that went silent before the
  // job started (a node killed while registering), so that its restart, or another, can have it.
  int64_t next_beat = NowMs() + options_.heartbeat_interval_ms;
  bool said_not_yet = false;
  std::string not_yet;               // the scheduler's last "not yet"
  int64_t ask_again_ms = INT64_MAX;  // after an Unavailable answer: when Register goes again
  while (!deadline.Expired()) {
    // Stopped meanwhile (a SIGINT or SIGTERM to a daemon, its owner's Stop()): not after the
    // registration deadline (found: a server waiting for a scheduler ignored SIGTERM for 120 s).
    if (StopAsked())
      return Status::Aborted("stopped while waiting for the scheduler at " + options_.scheduler +
                             " to answer registration");
    if (NowMs() >= ask_again_ms) {
      ask_again_ms = INT64_MAX;
      PP_RETURN_IF_ERROR(SendMessage(*sock_, nullptr, h));
    }
    if (NowMs() >= next_beat) {
      Header beat;
      beat.type = MsgType::kHeartbeat;
      beat.clock = 0;  // (no membership heard yet)
      SendMessage(*sock_, nullptr, beat).IgnoreError();
      next_beat = NowMs() + options_.heartbeat_interval_ms;
    }
    if (NowMs() >= next_note) {  // (the scheduler answers once every node of the job has registered)
      PP_LOG(Info) << "still waiting for the scheduler at " << options_.scheduler << " to answer registration ("
                   << deadline.RemainingMs() / 1000 << " s left" << unresolved_note << ")";
      next_note = NowMs() + 10000;
    }
    PollItem item{sock_.get()};
    transport_.Poll(&item, 1,
                    std::max<int64_t>(0, std::min({deadline.RemainingMs(), int64_t{200}, next_beat - NowMs(),
                                                   ask_again_ms - NowMs()})));
    if (!item.ready) continue;
    if (!RecvFrames(*sock_, &frames_)) continue;
    Message m;
    Status st = Decode(&frames_, &m);
    if (!st.ok()) {
      PP_LOG(Warning) << "dropping malformed message from the scheduler: " << st.ToString();
      continue;
    }
    // The scheduler gave up on the job while this node waited (registration timed out: it names
    // who is missing), or stopped.
    if (m.header.type == MsgType::kMembership && m.header.membership.job_state != Membership::kRunning)
      return Status::Aborted("the scheduler ended the job before it started: " + m.header.membership.reason);
    if (m.header.type != MsgType::kRegisterReply) continue;
    if (m.header.status == Code::kUnavailable) {
      // Not yet (a worker for a rank whose dead worker the scheduler has not declared dead yet):
      // asked again every 250 ms until the deadline.
      if (!said_not_yet)
        PP_LOG(Warning) << "the scheduler cannot take this node yet (" << m.header.error << "); asking again "
                        << "every 250 ms for " << deadline.RemainingMs() / 1000 << " s";
      said_not_yet = true;
      not_yet = m.header.error;
      ask_again_ms = NowMs() + 250;
      continue;
    }
    if (m.header.status != Code::kOk) return m.header.status_obj().Annotate("registration refused");
    // The rank and the lists are what this node indexes its state by: an answer that does not fit
    // itself is refused, whatever each field's own bounds allow.
    const ClusterMap& c = m.header.cluster;
    const int64_t of_role = role_ == Role::kServer ? int64_t(c.servers.size()) : c.num_workers;
    const int assigned = m.header.sender_rank;
    cluster_ = c;
    const std::string wrong = MembershipMismatch(m.header.membership);
    if (assigned < 0 || assigned >= of_role || !wrong.empty()) {
      cluster_ = ClusterMap();
      return Status::Corruption("the scheduler at " + options_.scheduler + " answered registration with rank " +
                                std::to_string(assigned) + " of " + std::to_string(of_role) + " " + RoleName(role_) +
                                "s" + (wrong.empty() ? "" : "; " + wrong));
    }
    rank_ = assigned;  // the scheduler puts the assigned rank here
    ApplyMembership(m.header.membership);
    last_heard_ms_ = NowMs();
    next_heartbeat_ms_ = last_heard_ms_ + options_.heartbeat_interval_ms;
    return Status::OK();
  }
  if (said_not_yet)
    return Status::DeadlineExceeded("the scheduler at " + options_.scheduler + " could not take this node within " +
                                    std::to_string(options_.register_timeout_ms) + " ms: " + not_yet);
  const std::string unresolved = UnresolvedHostNote(options_.scheduler);
  return Status::DeadlineExceeded(
      "waited " + std::to_string(options_.register_timeout_ms) + " ms for the scheduler at " + options_.scheduler +
      " to answer registration (" +
      (unresolved.empty() ? "is it running, and have all nodes started?" : unresolved.substr(2)) + ")");
}

bool ControlChannel::StopAsked() const { return StopRequested() || (stop_ && stop_->load()); }

Status ControlChannel::WaitUntilReachable(const Deadline& deadline) {
  TcpAddress tcp;
  if (!ParseTcpAddress(options_.scheduler, &tcp)) return Status::OK();  // (ipc://, inproc://: no probe)
  // A scheduler that answers but waits for other nodes is waited for up to register_timeout_ms;
  // one that cannot be reached at all (a typo in its name, a wrong port) is news at once.
  const Deadline reach = Deadline::In(options_.connect_timeout_ms);
  const Deadline& first = reach.at_ms() < deadline.at_ms() ? reach : deadline;
  std::string why;
  bool said = false;
  while (true) {
    if (StopAsked()) return Status::Aborted("stopped while trying to reach the scheduler at " + options_.scheduler);
    // (A connection attempt waits at most 1 s: a scheduler that starts meanwhile is then found soon.)
    why = ProbeTcp(tcp, std::max<int64_t>(1, std::min<int64_t>(first.RemainingMs(), 1000)));
    if (why.empty()) {
      if (said) PP_LOG(Info) << "reached the scheduler at " << options_.scheduler;
      return Status::OK();
    }
    if (first.Expired()) break;
    if (!said)
      PP_LOG(Warning) << "cannot reach the scheduler at " << options_.scheduler << " (" << why
                      << "); trying again for up to " << first.RemainingMs() / 1000.0 << " s";
    said = true;
    // Asked again every 200 ms: a name that resolves late (a pod's) or a scheduler that starts late.
    const int64_t until = NowMs() + std::min<int64_t>(200, first.RemainingMs());
    while (NowMs() < until && !StopAsked()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (&first == &reach)
    return Status::Unavailable("cannot reach the scheduler at " + options_.scheduler + " for " +
                               std::to_string(options_.connect_timeout_ms) + " ms: " + why);
  // The registration's own deadline came first: its error, with the reason.
  const std::string unresolved = UnresolvedHostNote(options_.scheduler);
  return Status::DeadlineExceeded("waited " + std::to_string(options_.register_timeout_ms) +
                                  " ms for the scheduler at " + options_.scheduler + " to answer registration (" +
                                  (unresolved.empty() ? "cannot reach it: " + why : unresolved.substr(2)) + ")");
}

std::string ControlChannel::MembershipMismatch(const Membership& m) const {
  const size_t W = static_cast<size_t>(std::max(0, cluster_.num_workers)), S = cluster_.servers.size();
  if (m.worker_alive.size() != W || m.worker_done.size() != W || m.worker_last_clock.size() != W ||
      m.server_alive.size() != S)
    return "its lists hold " + std::to_string(m.worker_alive.size()) + "/" + std::to_string(m.worker_done.size()) +
           "/" + std::to_string(m.worker_last_clock.size()) + " workers and " + std::to_string(m.server_alive.size()) +
           " servers, the job " + std::to_string(W) + " and " + std::to_string(S);
  return "";
}

bool ControlChannel::ApplyMembership(const Membership& m) {
  if (m.version <= membership_.version && membership_.version != 0) return false;
  // (Every node indexes these lists by rank: a scheduler's that do not fit the job are dropped.)
  if (const std::string wrong = MembershipMismatch(m); !wrong.empty()) {
    PP_LOG(Warning) << "dropping a membership from the scheduler that does not fit the job: " << wrong;
    return false;
  }
  membership_ = m;
  return true;
}

bool ControlChannel::Receive(Message* out, bool* membership_changed) {
  if (!sock_ || !RecvFrames(*sock_, &frames_)) return false;
  Status st = Decode(&frames_, out);
  if (!st.ok()) {
    PP_LOG(Warning) << "dropping malformed message from the scheduler: " << st.ToString();
    return false;
  }
  last_heard_ms_ = NowMs();
  if (warned_silence_) {
    PP_LOG(Info) << "heard from the scheduler again";
    warned_silence_ = false;
  }
  if (out->header.type == MsgType::kRegisterReply && rank_ >= 0 && out->header.status != Code::kOk) {
    if (dropped_.ok()) {
      dropped_ = Status::Aborted("the scheduler at " + options_.scheduler +
                                 " no longer counts this node: " + out->header.error);
      PP_LOG(Error) << dropped_.message();
    }
    return false;
  }
  if (out->header.type == MsgType::kMembership) {
    if (ApplyMembership(out->header.membership)) *membership_changed = true;
    return false;
  }
  return true;
}

Status ControlChannel::Tick(bool at_once) {
  if (!dropped_.ok()) return dropped_;
  int64_t now = NowMs();
  if (at_once) next_heartbeat_ms_ = now;
  if (now - last_heard_ms_ > options_.scheduler_timeout_ms)
    return Status::Unavailable("no word from the scheduler at " + options_.scheduler + " for " +
                               std::to_string(now - last_heard_ms_) + " ms");
  if (!warned_silence_ && now - last_heard_ms_ > options_.scheduler_timeout_ms / 2) {
    // Said before giving up, so that an operator sees it coming (a scheduler paused, or gone).
    PP_LOG(Warning) << "no word from the scheduler at " << options_.scheduler << " for " << now - last_heard_ms_
                    << " ms; giving up at " << options_.scheduler_timeout_ms << " ms (--scheduler_timeout_ms)";
    warned_silence_ = true;
  }
  if (now >= next_heartbeat_ms_) {
    Header h;
    h.type = MsgType::kHeartbeat;
    h.clock = static_cast<int64_t>(
        membership_.version);  // what this node has heard (the scheduler waits for a job's end to be)
    Status st = Send(h);
    if (!st.ok()) PP_LOG(Warning) << "heartbeat: " << st.ToString();
    next_heartbeat_ms_ = now + options_.heartbeat_interval_ms;
  }
  return Status::OK();
}

int64_t ControlChannel::MsUntilTick() const {
  int64_t d = next_heartbeat_ms_ - NowMs();
  return d < 0 ? 0 : d;
}

}  // namespace pushpull
