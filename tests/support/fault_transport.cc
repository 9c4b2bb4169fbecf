#include "tests/support/fault_transport.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "common/time.h"

namespace pushpull {

namespace {

// The endpoints a socket connected to, shared with its watches (which another thread reads).
struct Endpoints {
  Mutex mu;
  std::vector<std::string> list GUARDED_BY(mu);
};

}  // namespace

// A socket's connection events, with a cut's drops and returns told for each endpoint the
// socket connected to, then what the inner watch reports.
class FaultTransport::FaultWatch final : public ConnectionWatch {
 public:
  FaultWatch(FaultTransport* owner, std::unique_ptr<ConnectionWatch> inner, std::shared_ptr<Endpoints> endpoints)
      : owner_(owner), inner_(std::move(inner)), endpoints_(std::move(endpoints)), seen_(owner->cut_generation()) {}

  ConnectionWatch* inner() { return inner_.get(); }

  bool Next(ConnectionEvent* event) override {
    Update();
    if (!events_.empty()) {
      *event = std::move(events_.front());
      events_.pop_front();
      return true;
    }
    return inner_->Next(event);
  }

  // Whether Next has an event of this watch's own now.
  bool Ready() {
    Update();
    return !events_.empty();
  }
  // When it next has one (a cut ending), ms; -1: not before something happens.
  int64_t NextDueMs() const { return in_cut_ ? owner_->cut_end_ms() : -1; }

 private:
  void Update() {
    const int64_t generation = owner_->cut_generation();
    const bool cut = owner_->CutNow(NowMs());
    if (generation != seen_) {
      seen_ = generation;
      if (cut && !in_cut_) {
        in_cut_ = true;
        Tell(ConnectionEvent::kDisconnected);
      }
    }
    if (in_cut_ && !cut) {
      in_cut_ = false;
      Tell(ConnectionEvent::kConnected);
    }
  }
  void Tell(ConnectionEvent::Kind kind) {
    MutexLock l(&endpoints_->mu);
    for (const std::string& ep : endpoints_->list) events_.push_back({kind, ep});
  }

  FaultTransport* const owner_;
  const std::unique_ptr<ConnectionWatch> inner_;
  const std::shared_ptr<Endpoints> endpoints_;
  std::deque<ConnectionEvent> events_;
  int64_t seen_;  // the cut generation last looked at
  bool in_cut_ = false;
};

// A socket of the inner transport, with the faults its transport decides applied on the way.
// In-process pipes (options.network false) pass through untouched.
class FaultTransport::FaultSocket final : public Socket {
 public:
  FaultSocket(FaultTransport* owner, std::unique_ptr<Socket> inner, bool faulty)
      : owner_(owner), inner_(std::move(inner)), faulty_(faulty), seen_(owner->cut_generation()) {}

  Socket* inner() { return inner_.get(); }
  SocketKind kind() const override { return inner_->kind(); }
  Result<std::string> Bind(const std::string& endpoint) override { return inner_->Bind(endpoint); }
  Status Connect(const std::string& endpoint) override {
    Status st = inner_->Connect(endpoint);
    if (st.ok()) {
      MutexLock l(&endpoints_->mu);
      endpoints_->list.push_back(endpoint);
    }
    return st;
  }
  Status Disconnect(const std::string& endpoint) override {
    {
      MutexLock l(&endpoints_->mu);
      auto& v = endpoints_->list;
      v.erase(std::remove(v.begin(), v.end(), endpoint), v.end());
    }
    return inner_->Disconnect(endpoint);
  }

  Status Send(Frame* const* frames, size_t n, bool dont_wait, bool* would_block) override {
    *would_block = false;
    if (!faulty_) return inner_->Send(frames, n, dont_wait, would_block);
    std::vector<Frame*> parts(frames, frames + n);
    Decision d;
    if (owner_->CutNow(NowMs())) {
      owner_->CountLostInCut();
      d.drop = true;
    } else {
      d = owner_->Decide(FaultRule::kSend, kind(), parts);
    }
    if (d.drop || d.cut) {
      for (Frame* f : parts) *f = Frame();  // lost on the way: the caller's copies are all that is left
      return Status::OK();
    }
    if (d.duplicate) {
      std::vector<Frame> copies(n);
      std::vector<Frame*> ptrs(n);
      for (size_t i = 0; i < n; ++i) {
        copies[i].copy(*frames[i]);
        ptrs[i] = &copies[i];
      }
      bool blocked = false;
      PP_RETURN_IF_ERROR(inner_->Send(ptrs.data(), n, dont_wait, &blocked));
    }
    return inner_->Send(frames, n, dont_wait, would_block);
  }

  bool Recv(std::vector<Frame>* frames, size_t max_frames, int64_t wait_ms) override {
    if (!faulty_) return inner_->Recv(frames, max_frames, wait_ms);
    const int64_t deadline = NowMs() + std::max<int64_t>(wait_ms, 0);
    while (true) {
      ForgetHeldAfterCut();
      if (TakeHeld(frames)) return true;
      int64_t wait = std::max<int64_t>(deadline - NowMs(), 0);
      if (!held_.empty()) wait = std::min(wait, std::max<int64_t>(held_.front().first - NowMs(), 0));
      if (!inner_->Recv(frames, max_frames, wait)) {
        if (TakeHeld(frames)) return true;
        if (NowMs() >= deadline) return false;
        continue;
      }
      if (owner_->CutNow(NowMs())) {
        owner_->CountLostInCut();
        continue;
      }
      std::vector<Frame*> parts;
      for (Frame& f : *frames) parts.push_back(&f);
      const Decision d = owner_->Decide(FaultRule::kRecv, kind(), parts);
      if (d.drop || d.cut) continue;
      if (d.delay_ms > 0) {
        held_.emplace_back(NowMs() + d.delay_ms, std::move(*frames));
        frames->clear();
        continue;
      }
      if (d.duplicate) {
        std::vector<Frame> copy(frames->size());
        for (size_t i = 0; i < frames->size(); ++i) copy[i].copy((*frames)[i]);
        held_.emplace_front(0, std::move(copy));
      }
      return true;
    }
  }

  Result<std::unique_ptr<ConnectionWatch>> WatchConnections() override {
    PP_ASSIGN_OR_RETURN(std::unique_ptr<ConnectionWatch> inner, inner_->WatchConnections());
    return std::unique_ptr<ConnectionWatch>(new FaultWatch(owner_, std::move(inner), endpoints_));
  }

  // Whether Recv has a message of this socket's own now (one held back and due).
  bool Ready() {
    if (!faulty_) return false;
    ForgetHeldAfterCut();
    return !held_.empty() && held_.front().first <= NowMs();
  }
  // When it next has one, ms; -1: not before something arrives.
  int64_t NextDueMs() const { return held_.empty() ? -1 : held_.front().first; }

 private:
  // What was held back when a cut began was on its way: lost with the connection.
  void ForgetHeldAfterCut() {
    const int64_t generation = owner_->cut_generation();
    if (generation == seen_) return;
    seen_ = generation;
    held_.clear();
  }

  bool TakeHeld(std::vector<Frame>* frames) {
    if (held_.empty() || held_.front().first > NowMs()) return false;
    *frames = std::move(held_.front().second);
    held_.pop_front();
    return true;
  }

  FaultTransport* const owner_;
  const std::unique_ptr<Socket> inner_;
  const bool faulty_;
  const std::shared_ptr<Endpoints> endpoints_ = std::make_shared<Endpoints>();
  // Received messages held back (a delay) or to be delivered again (a duplicate, due at once),
  // by when they are due.
  std::deque<std::pair<int64_t, std::vector<Frame>>> held_;
  int64_t seen_;  // the cut generation last looked at
};

FaultTransport::FaultTransport(std::shared_ptr<Transport> inner, uint64_t seed)
    : inner_(std::move(inner)), rng_(seed) {}

FaultTransport::~FaultTransport() = default;

void FaultTransport::AddRule(const FaultRule& rule) {
  MutexLock l(&mu_);
  rules_.push_back(rule);
  matched_.push_back(0);
  acted_.push_back(0);
}

FaultTransport::Counts FaultTransport::counts() const {
  MutexLock l(&mu_);
  return counts_;
}

Result<std::unique_ptr<Socket>> FaultTransport::MakeSocket(SocketKind kind, const SocketOptions& options) {
  PP_ASSIGN_OR_RETURN(std::unique_ptr<Socket> inner, inner_->MakeSocket(kind, options));
  return std::unique_ptr<Socket>(new FaultSocket(this, std::move(inner), options.network));
}

int FaultTransport::Poll(PollItem* items, size_t n, int64_t timeout_ms) {
  int ready = 0;
  int64_t due = -1;
  for (size_t i = 0; i < n; ++i) {
    int64_t d;
    if (items[i].socket) {
      auto* s = static_cast<FaultSocket*>(items[i].socket);
      items[i].ready = s->Ready();
      d = s->NextDueMs();
    } else {
      auto* w = static_cast<FaultWatch*>(items[i].watch);
      items[i].ready = w->Ready();
      d = w->NextDueMs();
    }
    ready += items[i].ready;
    if (d >= 0) due = due < 0 ? d : std::min(due, d);
  }
  if (ready > 0) return ready;
  if (due >= 0) {
    const int64_t until = std::max<int64_t>(due - NowMs(), 0);
    timeout_ms = timeout_ms < 0 ? until : std::min(timeout_ms, until);
  }
  std::vector<PollItem> inner(n);
  for (size_t i = 0; i < n; ++i) {
    if (items[i].socket)
      inner[i] = PollItem(static_cast<FaultSocket*>(items[i].socket)->inner());
    else
      inner[i] = PollItem(static_cast<FaultWatch*>(items[i].watch)->inner());
  }
  ready = inner_->Poll(inner.data(), n, timeout_ms);
  for (size_t i = 0; i < n; ++i) items[i].ready = inner[i].ready;
  return ready;
}

FaultTransport::Decision FaultTransport::Decide(FaultRule::Direction dir, SocketKind kind,
                                                const std::vector<Frame*>& frames) {
  int type = FaultRule::kAnyType;
  const size_t header_at = kind == SocketKind::kRouter ? 1 : 0;
  if (frames.size() > header_at) {
    Header h;
    if (DecodeHeader(frames[header_at]->data(), frames[header_at]->size(), &h).ok()) type = static_cast<int>(h.type);
  }
  Decision d;
  MutexLock l(&mu_);
  for (size_t r = 0; r < rules_.size(); ++r) {
    const FaultRule& rule = rules_[r];
    if (rule.direction != dir || (rule.type != FaultRule::kAnyType && rule.type != type)) continue;
    ++matched_[r];
    if (rule.times >= 0 && acted_[r] >= rule.times) continue;
    const bool fire =
        rule.nth > 0 ? matched_[r] >= rule.nth : std::uniform_real_distribution<double>(0, 1)(rng_) < rule.probability;
    if (!fire) continue;
    ++acted_[r];
    switch (rule.action) {
      case FaultRule::kDrop:
        d.drop = true;
        ++counts_.dropped;
        break;
      case FaultRule::kDelay:
        d.delay_ms = std::max(rule.delay_ms, 1);
        ++counts_.delayed;
        break;
      case FaultRule::kDuplicate:
        d.duplicate = true;
        ++counts_.duplicated;
        break;
      case FaultRule::kCut:
        d.cut = true;
        ++counts_.cuts;
        ++cut_generation_;
        cut_until_ms_ = NowMs() + std::max(rule.cut_ms, 1);
        break;
    }
    break;  // one fault a message
  }
  return d;
}

bool FaultTransport::CutNow(int64_t now_ms) {
  MutexLock l(&mu_);
  return now_ms < cut_until_ms_;
}

void FaultTransport::CountLostInCut() {
  MutexLock l(&mu_);
  ++counts_.lost_in_cuts;
}

int64_t FaultTransport::cut_generation() const {
  MutexLock l(&mu_);
  return cut_generation_;
}

int64_t FaultTransport::cut_end_ms() const {
  MutexLock l(&mu_);
  return cut_until_ms_;
}

}  // namespace pushpull
