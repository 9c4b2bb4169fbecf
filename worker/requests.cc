// The table of unanswered requests and the calling threads' queue to the I/O thread.
// Threading: see worker/requests.h.

#include "worker/requests.h"

#include <cstring>
#include <utility>

namespace pushpull {
namespace internal {

void RequestTable::Pending::Grow(int s) {
  if (per_server_.size() > size_t(s)) return;
  per_server_.resize(s + 1, 0);
  sent_.resize(s + 1, 0);
  protected_.resize(s + 1, false);
}

void RequestTable::Pending::Protect(int s, bool on) {
  Grow(s);
  protected_[s] = on;
}

size_t RequestTable::Pending::SentPastOldest(int s) const {
  if (s < 0 || size_t(s) >= protected_.size() || !protected_[s] || per_server_[s] == 0) return 0;
  for (const auto& [id, part] : m_)
    if (part.target == s) return sent_[s] - part.seq;
  return 0;
}

void RequestTable::Pending::emplace(uint64_t id, CallPart p) {
  const size_t b = p.bytes;
  const int s = p.target;
  if (s >= 0) {
    Grow(s);
    p.seq = sent_[s] + 1;
  }
  if (m_.try_emplace(id, std::move(p)).second) {
    bytes_ += b;
    if (s >= 0) {
      ++per_server_[s];
      ++sent_[s];
      ++to_servers_;
    }
  }
}

RequestTable::Map::iterator RequestTable::Pending::erase(Map::iterator it) {
  bytes_ -= it->second.bytes;
  if (it->second.target >= 0) --per_server_[it->second.target], --to_servers_;
  return m_.erase(it);
}

RequestTable::Map RequestTable::Pending::TakeAll() {
  bytes_ = 0;
  to_servers_ = 0;
  per_server_.assign(per_server_.size(), 0);
  return std::exchange(m_, Map());
}

void RequestTable::Add(uint64_t id, CallPart part) {
  MutexLock l(&mu_);
  pending_.emplace(id, std::move(part));
}

bool RequestTable::Remove(uint64_t id) {
  MutexLock l(&mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  pending_.erase(it);
  return true;
}

void RequestTable::MarkUnsent(uint64_t id) {
  MutexLock l(&mu_);
  auto it = pending_.find(id);
  if (it != pending_.end()) it->second.unsent = true;
}

std::shared_ptr<FutureState> RequestTable::StateOf(uint64_t id) const {
  MutexLock l(&mu_);
  auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : it->second.fs;
}

RequestTable::Match RequestTable::TakeAnswered(uint64_t id, int from, CallPart* part, int* target) {
  MutexLock l(&mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return Match::kUnknown;
  *target = it->second.target;
  if (it->second.target != from) return Match::kOtherTarget;
  *part = std::move(it->second);
  pending_.erase(it);
  return Match::kTaken;
}

void RequestTable::FailTarget(int target, const Status& st) {
  std::vector<CallPart> failed;
  {
    MutexLock l(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.target != target) {
        ++it;
        continue;
      }
      failed.push_back(std::move(it->second));
      it = pending_.erase(it);
    }
  }
  for (auto& p : failed) p.fs->Complete(target, st);
}

void RequestTable::FailAll(const Status& st) {
  Map failed = TakeAll();
  for (auto& [id, part] : failed) part.fs->Complete(part.target, st);
}

std::vector<std::shared_ptr<FutureState>> RequestTable::TakeDoneRequests() {
  std::vector<std::shared_ptr<FutureState>> done;
  MutexLock l(&mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.target != kScheduler || it->second.reply_type != MsgType::kDoneReply) {
      ++it;
      continue;
    }
    done.push_back(it->second.fs);
    it = pending_.erase(it);
  }
  return done;
}

RequestTable::Map RequestTable::TakeAll() {
  MutexLock l(&mu_);
  return pending_.TakeAll();
}

std::vector<std::shared_ptr<FutureState>> RequestTable::OpenToServers() const {
  std::vector<std::shared_ptr<FutureState>> open;
  MutexLock l(&mu_);
  for (auto& [id, part] : pending_)
    if (part.target != kScheduler) open.push_back(part.fs);
  return open;
}

void RequestTable::OpenPushesAndClocks(std::vector<std::shared_ptr<FutureState>>* pushes,
                                       std::vector<std::shared_ptr<FutureState>>* clocks) const {
  MutexLock l(&mu_);
  for (auto& [id, part] : pending_) {
    if (part.target == kScheduler) continue;
    if (part.reply_type == MsgType::kPushReply) pushes->push_back(part.fs);
    if (part.reply_type == MsgType::kClockReply) clocks->push_back(part.fs);
  }
}

size_t RequestTable::bytes() const {
  MutexLock l(&mu_);
  return pending_.bytes();
}

size_t RequestTable::to_servers() const {
  MutexLock l(&mu_);
  return pending_.to_servers();
}

void RequestTable::Protect(int s, bool on) {
  MutexLock l(&mu_);
  pending_.Protect(s, on);
}

Room RequestTable::CheckRoom(const std::vector<std::unique_ptr<Command>>& cmds, size_t limit) const {
  size_t bytes = 0;
  for (const auto& c : cmds) bytes += c->keys.size() + c->values.size();
  Room room;
  MutexLock l(&mu_);
  room.held = pending_.bytes();
  const bool bytes_fit = limit == 0 || bytes == 0 || room.held == 0 || room.held + bytes <= limit;
  // This call's requests to each server: a call's commands go server by server (a run each).
  for (size_t i = 0; i < cmds.size();) {
    size_t j = i + 1;
    while (j < cmds.size() && cmds[j]->part.target == cmds[i]->part.target) ++j;
    const int server = cmds[i]->part.target;
    const size_t unanswered = pending_.to_server(server);  // (0 for the scheduler)
    const size_t n = j - i;
    // The server's record keeps its last kMaxUnansweredRequests answers: no more are ever
    // unanswered, nor sent past one whose answer may be lost until it is asked for again.
    if (server >= 0 && unanswered > 0 &&
        (unanswered + n > kMaxUnansweredRequests || pending_.SentPastOldest(server) + n >= kMaxUnansweredRequests))
      room.full = server;
    i = j;
  }
  room.fits = bytes_fit && room.full < 0;
  if (room.fits) return room;
  for (auto& [id, part] : pending_) {  // the oldest that holds what is short (not a barrier, say)
    if (bytes_fit ? part.target != room.full : part.bytes == 0) continue;
    room.oldest = part.fs;
    break;
  }
  return room;
}

std::vector<RequestTable::Resend> RequestTable::CopyToResend(int s, bool unsent_only, uint64_t below) {
  std::vector<Resend> again;
  MutexLock l(&mu_);
  for (auto& [id, p] : pending_) {
    if (p.target != s || id >= below || (unsent_only && !p.unsent)) continue;
    again.push_back({id, {}, p.fs});
    again.back().frames[0].copy(p.sent_header);
    again.back().frames[1].copy(p.sent_keys);
    again.back().frames[2].copy(p.sent_values);
  }
  return again;
}

bool RequestTable::AfterResend(int s, const std::vector<Resend>& again,
                               std::vector<std::shared_ptr<FutureState>>* failed) {
  MutexLock l(&mu_);
  for (const Resend& a : again) {
    auto it = pending_.find(a.id);
    if (it == pending_.end()) continue;
    if (a.outcome == Resend::kGaveUp) {
      failed->push_back(it->second.fs);
      pending_.erase(it);
    } else {
      it->second.unsent = a.outcome == Resend::kHeld;
    }
  }
  // Held: whatever to s is still unsent, these or any past `below`, so that no later request
  // overtakes one held back.
  bool any = false;
  for (const auto& [id, p] : pending_) any |= p.target == s && p.unsent;
  return any;
}

Status CommandQueue::Open() {
  SocketOptions o;
  o.network = false;
  o.send_hwm = 0;  // a caller never blocks handing a command over
  PP_ASSIGN_OR_RETURN(auto in, transport_.MakeSocket(SocketKind::kPull, o));
  PP_ASSIGN_OR_RETURN(auto out, transport_.MakeSocket(SocketKind::kPush, o));
  in_ = std::move(in);
  const std::string ep = "inproc://pp-cmd-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  PP_RETURN_IF_ERROR(in_->Bind(ep).status());
  MutexLock l(&mu_);
  out_ = std::move(out);
  return out_->Connect(ep);
}

void CommandQueue::Post(std::unique_ptr<Command> c) {
  Command* raw = c.release();
  Frame m(&raw, sizeof(raw));
  Frame* parts[] = {&m};
  bool would_block = false;  // (no limit: never)
  MutexLock l(&mu_);
  out_->Send(parts, 1, /*dont_wait=*/false, &would_block).IgnoreError();
}

std::unique_ptr<Command> CommandQueue::Take() {
  if (!in_ || !in_->Recv(&in_frames_, 1, 0) || in_frames_.empty() || in_frames_[0].size() != sizeof(Command*))
    return nullptr;
  Command* raw;
  std::memcpy(&raw, in_frames_[0].data(), sizeof(raw));
  {
    // The Command was posted under mu_; taking the lock makes that ordering explicit (the pipe's
    // own hand-off is invisible to ThreadSanitizer). Uncontended: cheap.
    MutexLock l(&mu_);
  }
  return std::unique_ptr<Command>(raw);
}

}  // namespace internal
}  // namespace pushpull
