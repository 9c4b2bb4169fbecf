#include "server/scheduler/state.h"

#include "common/time.h"

namespace pushpull::scheduler {

std::string NodeName(const Node& n) {
  std::string s = std::string(RoleName(n.role)) + " " + std::to_string(n.rank);
  if (!n.address.empty()) s += " (" + n.address + ")";
  return s;
}

bool State::SendMembership(const std::string& identity) {
  Header h;
  h.type = MsgType::kMembership;
  h.membership = membership;
  return Send(identity, h);
}

void State::Broadcast() {
  Header h;
  h.type = MsgType::kMembership;
  h.membership = membership;
  for (auto& [id, n] : nodes) {
    if (!n.alive) continue;
    // A node the end did not reach is told when it next heartbeats, within the end's grace period.
    if (Send(id, h) && membership.job_state != Membership::kRunning) n.told_end = true;
  }
}

void State::ReplyTo(const Waiter& w, MsgType type, const Status& st, const TableInfo* info) {
  Header h;
  h.type = type;
  h.request_id = w.request_id;
  h.SetStatus(st);
  if (info) {
    h.info = *info;
    h.spec = info->spec;
  }
  auto n = nodes.find(w.identity);
  if (n != nodes.end()) {
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

bool State::AnswerRepeat(const Node& n, const Header& req) {
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

std::optional<MsgType> State::ReplyTypeOf(MsgType request) {
  switch (request) {
    case MsgType::kCreateTable: return MsgType::kCreateTableReply;
    case MsgType::kBarrier: return MsgType::kBarrierReply;
    case MsgType::kCheckpoint: return MsgType::kCheckpointReply;
    case MsgType::kDone: return MsgType::kDoneReply;
    default: return std::nullopt;
  }
}

bool State::ResendDue(int64_t* resend_ms) const {
  const int64_t now = NowMs();
  if (now < *resend_ms) return false;
  *resend_ms = now + ResendIntervalMs();
  return true;
}

void State::SendToServers(const Header& h, const std::set<int>& answered) {
  for (Node* s : servers)
    if (!answered.count(s->rank)) Send(s->identity, h);
}

}  // namespace pushpull::scheduler
