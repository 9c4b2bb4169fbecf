#include "tests/support/delay_transport.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "common/time.h"

namespace pushpull {

// A socket of the inner transport whose received messages wait delay_ms (0: none) before Recv
// hands them out. Watches are the inner socket's: no connection is delayed.
class DelayTransport::DelaySocket final : public Socket {
 public:
  DelaySocket(std::unique_ptr<Socket> inner, int delay_ms) : inner_(std::move(inner)), delay_ms_(delay_ms) {}

  Socket* inner() { return inner_.get(); }
  SocketKind kind() const override { return inner_->kind(); }
  Result<std::string> Bind(const std::string& endpoint) override { return inner_->Bind(endpoint); }
  Status Connect(const std::string& endpoint) override { return inner_->Connect(endpoint); }
  Status Disconnect(const std::string& endpoint) override { return inner_->Disconnect(endpoint); }
  Status Send(Frame* const* frames, size_t n, bool dont_wait, bool* would_block) override {
    return inner_->Send(frames, n, dont_wait, would_block);
  }
  Result<std::unique_ptr<ConnectionWatch>> WatchConnections() override { return inner_->WatchConnections(); }

  bool Recv(std::vector<Frame>* frames, size_t max_frames, int64_t wait_ms) override {
    if (delay_ms_ <= 0) return inner_->Recv(frames, max_frames, wait_ms);
    const int64_t deadline = NowMs() + std::max<int64_t>(wait_ms, 0);
    while (true) {
      // Whatever has arrived joins the line first, stamped with its arrival.
      while (inner_->Recv(frames, max_frames, 0)) held_.emplace_back(NowMs() + delay_ms_, std::move(*frames));
      frames->clear();
      if (!held_.empty() && held_.front().first <= NowMs()) {
        *frames = std::move(held_.front().second);
        held_.pop_front();
        return true;
      }
      const int64_t now = NowMs();
      if (now >= deadline) return false;
      int64_t wait = deadline - now;
      if (!held_.empty()) wait = std::min(wait, held_.front().first - now);
      if (inner_->Recv(frames, max_frames, std::max<int64_t>(wait, 1)))
        held_.emplace_back(NowMs() + delay_ms_, std::move(*frames));
      frames->clear();
    }
  }

  // Whether Recv has a message due now.
  bool Ready() const { return delay_ms_ > 0 && !held_.empty() && held_.front().first <= NowMs(); }
  // When it next has one, ms; -1: not before something arrives.
  int64_t NextDueMs() const { return held_.empty() ? -1 : held_.front().first; }

 private:
  const std::unique_ptr<Socket> inner_;
  const int delay_ms_;
  std::deque<std::pair<int64_t, std::vector<Frame>>> held_;  // received, by when each is due
};

DelayTransport::DelayTransport(std::shared_ptr<Transport> inner, int delay_ms, std::vector<SocketKind> delayed_kinds)
    : inner_(std::move(inner)), delay_ms_(delay_ms), delayed_kinds_(std::move(delayed_kinds)) {}

Result<std::unique_ptr<Socket>> DelayTransport::MakeSocket(SocketKind kind, const SocketOptions& options) {
  PP_ASSIGN_OR_RETURN(std::unique_ptr<Socket> inner, inner_->MakeSocket(kind, options));
  const bool delayed = std::find(delayed_kinds_.begin(), delayed_kinds_.end(), kind) != delayed_kinds_.end();
  return std::unique_ptr<Socket>(new DelaySocket(std::move(inner), delayed ? delay_ms_ : 0));
}

int DelayTransport::Poll(PollItem* items, size_t n, int64_t timeout_ms) {
  int ready = 0;
  int64_t due = -1;
  for (size_t i = 0; i < n; ++i) {
    items[i].ready = false;
    if (!items[i].socket) continue;
    auto* s = static_cast<DelaySocket*>(items[i].socket);
    items[i].ready = s->Ready();
    ready += items[i].ready;
    const int64_t d = s->NextDueMs();
    if (d >= 0) due = due < 0 ? d : std::min(due, d);
  }
  if (ready > 0) return ready;
  if (due >= 0) {
    const int64_t until = std::max<int64_t>(due - NowMs(), 0);
    timeout_ms = timeout_ms < 0 ? until : std::min(timeout_ms, until);
  }
  std::vector<PollItem> inner(n);
  for (size_t i = 0; i < n; ++i)
    inner[i] = items[i].socket ? PollItem(static_cast<DelaySocket*>(items[i].socket)->inner()) : items[i];
  ready = inner_->Poll(inner.data(), n, timeout_ms);
  for (size_t i = 0; i < n; ++i) items[i].ready = inner[i].ready;
  return ready;
}

}  // namespace pushpull
