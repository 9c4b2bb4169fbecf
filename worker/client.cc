// The worker client. Calling threads send their requests themselves (a tx DEALER per server,
// under send_mu_); replies from every server come back on one rx DEALER, connected to them all,
// that the requests name. Whoever holds the rx socket's lock receives: a thread waiting on a
// Future (no hand-off between threads on the reply path), or else the I/O thread, which drains
// it periodically and owns the control channel to the scheduler. Replies are matched to
// requests by id and complete Futures.

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "common/address.h"
#include "common/control.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/time.h"
#include "common/wire.h"
#include "optimizers/optimizer.h"
#include "pushpull/client.h"

namespace pushpull {
namespace internal {

// The client side of "the waiter receives": a thread waiting on a Future takes `mu` (the rx
// sockets' lock) and, while the client is open (`client` set), receives replies itself.
struct FutureState;
class Receiver {
 public:
  // Receives and handles replies for up to `ms` or until `fs` is done. Caller holds the lock.
  virtual void ReceiveFor(const FutureState& fs, int64_t ms) = 0;

 protected:
  ~Receiver() = default;
};
struct ReceiverHandle {
  std::mutex mu;
  Receiver* client = nullptr;  // under mu; null once the client is closing
  std::atomic<bool> waiter_receiving{false};  // a waiting caller holds mu and receives
};
// How long a receiving waiter blocks in one receive before it looks again at its deadline (its
// call may also fail from the I/O thread, e.g. a server declared dead). Long enough that a large
// transfer does not wake it for nothing: each wake-up costs system calls and a context switch.
constexpr int64_t kReceiveSliceMs = 50;
Status WaitState(const std::shared_ptr<FutureState>& s, int64_t timeout_ms, bool abandon);

struct FutureState {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  std::atomic<int> remaining_hint{1};  // lock-free view of remaining, for the receiving waiter
  Status status;
  Status answered_status;          // the first error an answer (or a refusal to send) gave, never
                                   // the caller's giving up (a settled Clock() looks at this)
  bool abandoned = false;          // the waiter gave up: never touch `out` again
  std::atomic<int> handles{0};     // Future copies that refer to it
  bool writes_destination = false; // a pull into the caller's memory: given up with its last Future
  int32_t staleness = 0;
  // What the call was, for errors: `what`, or else what_kind, what_table and what_rows, spelled
  // out only when needed (What()): formatting it on every call cost an allocation per call.
  std::string what;                // "clock 5", "create table 'w'"
  const char* what_kind = "";      // "pull from table"
  std::string what_table;
  int64_t what_rows = -1;
  std::vector<uint32_t> waiting_on; // parts unanswered per server (last entry: the scheduler)
  int64_t default_timeout_ms = 0;
  Header reply;                    // control replies (CreateTable)
  std::shared_ptr<ReceiverHandle> receiver;  // set when servers answer (the waiter may receive)

  std::string What() const {
    if (!what.empty()) return what;
    std::string s = std::string(what_kind) + " '" + what_table + "'";
    if (what_rows >= 0) s += " (" + std::to_string(what_rows) + " rows)";
    return s;
  }

  void Complete(int target, const Status& st, int32_t stale = 0) {
    std::lock_guard<std::mutex> l(mu);
    if (!st.ok() && status.ok()) status = st;
    if (!st.ok() && answered_status.ok()) answered_status = st;
    // A waiter that gave up was told DeadlineExceeded and nothing was written for it since: the
    // call must not turn OK later (a pull's values are not in its destination).
    if (abandoned && status.ok())
      status = Status::DeadlineExceeded(What() + ": a reply came after the wait expired; its values were not written");
    if (stale > staleness) staleness = stale;
    if (target >= 0 && target < static_cast<int>(waiting_on.size()) && waiting_on[target] > 0) --waiting_on[target];
    if (--remaining == 0) {
      remaining_hint.store(0, std::memory_order_release);
      cv.notify_all();
    }
  }
};

// The received value frames of a PullDenseView or PullView: per request ("server part": a
// server's part of the pull; of a dense one a block, of a sparse one up to a block's keys), in
// row order, the frames of its reply (one per stripe of its rows: of a dense pull in row order,
// of a keyed one over several stripes each stripe's rows in turn, see key_of_row).
struct PulledParts {
  std::vector<std::vector<zmq::message_t>> frames;  // [server part][frame]
  std::vector<uint64_t> first_row;                  // [server part] its first row (see positions)
  // Keyed: [server part] the key index of each row it holds; empty: consecutive key indices from
  // first_row[part] (keys in server order, GroupByServer).
  std::vector<std::vector<uint32_t>> positions;
  // Keyed: [server part] which of its keys each reply row is, for a reply of several stripes
  // (kFlagByStripe); empty: in key order.
  std::vector<std::vector<uint32_t>> key_of_row;
  bool keyed = false;
  size_t rows = 0;
  uint32_t dim = 0;
  std::atomic<size_t> landed{0};  // server parts whose reply is in `frames`
  std::string refused;            // the pull failed before it was sent: why

  // Read only once every part landed (the pull succeeded): the lists below are made once.
  void CheckComplete() const {
    if (!refused.empty()) throw std::logic_error("PulledRows of a pull that failed: " + refused);
    if (landed.load(std::memory_order_acquire) != frames.size())
      throw std::logic_error("PulledRows read before its pull succeeded (" + std::to_string(landed.load()) + " of " +
                             std::to_string(frames.size()) + " server replies in)");
  }

  // Every frame in row order with the first row it holds, listed on first use (the pull is done
  // by then: PulledRows is read only after its Future).
  struct Part {
    const zmq::message_t* frame;
    uint64_t first_row;
  };
  const std::vector<Part>& Parts() const {
    CheckComplete();
    std::call_once(listed_, [this] {
      for (size_t s = 0; s < frames.size(); ++s) {
        uint64_t r = keyed ? 0 : first_row[s];
        for (const zmq::message_t& f : frames[s]) {
          parts_.push_back({&f, r});
          r += f.size() / sizeof(float) / dim;
        }
      }
    });
    return parts_;
  }
  // Where each row is: keyed pulls, listed on first use (one pointer per key).
  // nullptr when no frame holds it.
  const float* Row(size_t i) const {
    if (!keyed) {
      const std::vector<Part>& p = Parts();
      auto it = std::upper_bound(p.begin(), p.end(), i, [](size_t r, const Part& x) { return r < x.first_row; });
      if (it == p.begin()) return nullptr;
      --it;
      if (i - it->first_row >= it->frame->size() / sizeof(float) / dim) return nullptr;
      return static_cast<const float*>(it->frame->data()) + (i - it->first_row) * dim;
    }
    CheckComplete();
    std::call_once(indexed_, [this] {
      rows_.assign(rows, nullptr);
      for (size_t s = 0; s < frames.size(); ++s) {
        size_t j = 0;  // row within this server's reply
        for (const zmq::message_t& f : frames[s]) {
          const float* src = static_cast<const float*>(f.data());
          const size_t n = dim ? f.size() / sizeof(float) / dim : 0;
          for (size_t k = 0; k < n; ++k, ++j) {
            const size_t key = key_of_row[s].empty() ? j : key_of_row[s][j];
            rows_[positions[s].empty() ? first_row[s] + key : positions[s][key]] = src + k * dim;
          }
        }
      }
    });
    return rows_[i];
  }

 private:
  mutable std::once_flag listed_, indexed_;
  mutable std::vector<Part> parts_;
  mutable std::vector<const float*> rows_;
};

}  // namespace internal

using internal::FutureState;

size_t PulledRows::num_rows() const {
  if (p_ && !p_->refused.empty()) p_->CheckComplete();  // throws
  return p_ ? p_->rows : 0;
}
const float* PulledRows::row(size_t i) const {
  if (p_ && !p_->refused.empty()) p_->CheckComplete();  // throws
  if (!p_ || i >= p_->rows) throw std::out_of_range("PulledRows::row(" + std::to_string(i) + ") of " +
                                                    std::to_string(num_rows()));
  const float* r = p_->Row(i);
  if (!r) throw std::logic_error("PulledRows::row(" + std::to_string(i) + "): no server reply holds it");
  return r;
}
size_t PulledRows::num_parts() const { return p_ ? p_->Parts().size() : 0; }
namespace {
const internal::PulledParts::Part& PartAt(const std::shared_ptr<internal::PulledParts>& p, size_t i) {
  if (!p) throw std::out_of_range("PulledRows::part(" + std::to_string(i) + ") of an empty PulledRows");
  return p->Parts().at(i);
}
}  // namespace
const float* PulledRows::part(size_t i) const { return static_cast<const float*>(PartAt(p_, i).frame->data()); }
size_t PulledRows::part_floats(size_t i) const { return PartAt(p_, i).frame->size() / sizeof(float); }
uint64_t PulledRows::part_first_row(size_t i) const { return PartAt(p_, i).first_row; }
void PulledRows::CopyTo(float* out) const {
  if (!p_) return;  // (never pulled into)
  p_->CheckComplete();
  if (p_->keyed) {
    for (size_t i = 0; i < p_->rows; ++i) std::memcpy(out + i * p_->dim, row(i), p_->dim * sizeof(float));
    return;
  }
  for (size_t s = 0; s < p_->frames.size(); ++s) {
    float* to = out + p_->first_row[s] * p_->dim;
    for (const zmq::message_t& f : p_->frames[s]) {
      std::memcpy(to, f.data(), f.size());
      to += f.size() / sizeof(float);
    }
  }
}

// Lets the client fill a PulledRows without making its internals public.
class ClientAccess {
 public:
  static std::shared_ptr<internal::PulledParts>& parts(PulledRows* r) { return r->p_; }
};

Future::Future(std::shared_ptr<internal::FutureState> s) : s_(std::move(s)) {
  if (s_) s_->handles.fetch_add(1, std::memory_order_relaxed);
}
Future::Future(const Future& o) : s_(o.s_) {
  if (s_) s_->handles.fetch_add(1, std::memory_order_relaxed);
}
Future& Future::operator=(const Future& o) {
  if (this != &o) {
    if (o.s_) o.s_->handles.fetch_add(1, std::memory_order_relaxed);
    Release();
    s_ = o.s_;
  }
  return *this;
}
Future& Future::operator=(Future&& o) noexcept {
  if (this != &o) {
    Release();
    s_ = std::move(o.s_);
  }
  return *this;
}
Future::~Future() { Release(); }
void Future::Release() {
  if (!s_) return;
  if (s_->handles.fetch_sub(1, std::memory_order_acq_rel) == 1 && s_->writes_destination) {
    std::lock_guard<std::mutex> l(s_->mu);
    if (s_->remaining > 0) s_->abandoned = true;  // the reply is not written (see Complete)
  }
  s_.reset();
}

Status Future::Wait() { return s_ ? WaitFor(s_->default_timeout_ms) : Status::OK(); }

Status Future::WaitFor(int64_t timeout_ms) { return internal::WaitState(s_, timeout_ms, /*abandon=*/true); }

// Waits for a call's answers; on expiry, with `abandon`, the waiter gives up on it (a pull's late
// reply is then not written to its destination); without, a later wait may still succeed.
Status internal::WaitState(const std::shared_ptr<FutureState>& s_, int64_t timeout_ms, bool abandon) {
  if (!s_) return Status::OK();
  const Deadline deadline = Deadline::In(timeout_ms);
  // While the servers' replies are outstanding, receive them here unless another thread is: the
  // reply then reaches this thread with no hand-off. Otherwise sleep on the condition variable,
  // in short slices so as to take over receiving when the other thread stops.
  while (s_->remaining_hint.load(std::memory_order_acquire) > 0 && !deadline.Expired()) {
    const int64_t left = std::max<int64_t>(1, deadline.RemainingMs());
    if (s_->receiver) {
      std::unique_lock<std::mutex> rl(s_->receiver->mu, std::try_to_lock);
      if (rl.owns_lock() && s_->receiver->client) {
        s_->receiver->waiter_receiving.store(true, std::memory_order_relaxed);
        s_->receiver->client->ReceiveFor(*s_, std::min<int64_t>(left, kReceiveSliceMs));
        s_->receiver->waiter_receiving.store(false, std::memory_order_relaxed);
        continue;
      }
    }
    std::unique_lock<std::mutex> l(s_->mu);
    const auto slice = s_->receiver ? std::chrono::microseconds(500)
                                    : std::chrono::microseconds(std::min<int64_t>(left, 1000) * 1000);
    s_->cv.wait_for(l, slice, [&] { return s_->remaining <= 0; });
  }
  std::unique_lock<std::mutex> l(s_->mu);
  if (s_->remaining > 0) {
    if (abandon) s_->abandoned = true;
    std::string who;
    for (size_t i = 0; i < s_->waiting_on.size(); ++i) {
      if (!s_->waiting_on[i]) continue;
      if (!who.empty()) who += ", ";
      who += i + 1 == s_->waiting_on.size() ? "the scheduler" : "server " + std::to_string(i);
    }
    return Status::DeadlineExceeded(s_->What() + ": no answer within " + std::to_string(timeout_ms) +
                                    " ms from " + who);
  }
  return s_->status;
}

bool Future::Ready() const {
  if (!s_) return true;
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->remaining <= 0;
}

int32_t Future::staleness() const {
  if (!s_) return 0;
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->staleness;
}

namespace {

// One server's (or the scheduler's) piece of a call, as the I/O thread tracks it.
struct Part {
  std::shared_ptr<FutureState> fs;
  int target = 0;                  // server rank, or kScheduler
  MsgType reply_type = MsgType::kPushReply;
  bool bsp = false;                // a push to a BSP table (its Clock() is settled)
  std::shared_ptr<internal::PulledParts> view;  // PullDenseView, PullView: keep the frames here, at view_index
  size_t view_index = 0;
  float* out = nullptr;            // pulls: where row i of the reply goes ...
  std::vector<uint32_t> positions; // ... out + positions[i]*dim, or out + i*dim when empty
  uint64_t rows = 0;
  uint32_t dim = 0;
  bool sparse = false;             // a keyed pull of a sparse table (may be answered by stripe)
  // Server requests: the frames as sent (sharing their buffers), to send again when a connection
  // to the server drops before the answer came (the server answers a repeat once).
  zmq::message_t sent_header, sent_keys, sent_values;
  bool unsent = false;  // held back (ZeroMQ could not take it, or one before it): FlushHeld sends it
  size_t bytes = 0;     // payload held for it (keys and values): counted against max_unanswered_mb
  uint64_t seq = 0;     // server requests: how many went to its server before it, and it
};

// Requests sent (or held back) and not yet answered, by request id, oldest first, and the payload
// bytes they keep alive until answered (ClientOptions::max_unanswered_mb). Guarded by its owner.
class PendingRequests {
 public:
  using Map = std::map<uint64_t, Part>;
  Map::iterator begin() { return m_.begin(); }
  Map::iterator end() { return m_.end(); }
  Map::iterator find(uint64_t id) { return m_.find(id); }
  bool empty() const { return m_.empty(); }
  size_t bytes() const { return bytes_; }
  size_t to_servers() const { return to_servers_; }  // requests to any server (not the scheduler's)
  // Requests to server s unanswered (kMaxUnansweredRequests).
  size_t to_server(int s) const { return s >= 0 && size_t(s) < per_server_.size() ? per_server_[s] : 0; }
  // While server s's answers may have been lost (ClientImpl::OnConnectionEvents: from a reconnect
  // of their connection until they have all been asked for again), its record of them must still
  // hold the oldest one unanswered: requests sent to s since it count against the record then.
  void Protect(int s, bool on) {
    Grow(s);
    protected_[s] = on;
  }
  // Requests sent to s after its oldest unanswered one, while s is protected; else 0.
  size_t SentPastOldest(int s) const {
    if (s < 0 || size_t(s) >= protected_.size() || !protected_[s] || per_server_[s] == 0) return 0;
    for (const auto& [id, part] : m_)
      if (part.target == s) return sent_[s] - part.seq;
    return 0;
  }
  void emplace(uint64_t id, Part p) {
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
  Map::iterator erase(Map::iterator it) {
    bytes_ -= it->second.bytes;
    if (it->second.target >= 0) --per_server_[it->second.target], --to_servers_;
    return m_.erase(it);
  }
  size_t erase(uint64_t id) {
    auto it = m_.find(id);
    if (it == m_.end()) return 0;
    erase(it);
    return 1;
  }
  Map TakeAll() {
    bytes_ = 0;
    to_servers_ = 0;
    per_server_.assign(per_server_.size(), 0);
    return std::exchange(m_, Map());
  }

 private:
  void Grow(int s) {
    if (per_server_.size() > size_t(s)) return;
    per_server_.resize(s + 1, 0);
    sent_.resize(s + 1, 0);
    protected_.resize(s + 1, false);
  }
  Map m_;
  size_t bytes_ = 0;
  size_t to_servers_ = 0;
  std::vector<size_t> per_server_;
  std::vector<uint64_t> sent_;   // requests ever sent to each server (Part::seq)
  std::vector<bool> protected_;  // Protect()
};

struct Command {
  Header header;
  zmq::message_t keys, values;
  Part part;
  bool despite_sticky = false;  // a request to the scheduler sent after a sticky error (Leave)
};

constexpr int kScheduler = -1;

// A worker's side of the control plane, from its options.
ControlOptions ControlOptionsOf(const ClientOptions& o) {
  return ControlOptions{o.scheduler, o.heartbeat_interval_ms, o.scheduler_timeout_ms, o.register_timeout_ms,
                        o.requested_rank};
}
constexpr int64_t kDrainMs = 2;
// How often a call waiting for room (max_unanswered_mb) looks again at the bytes unanswered.
constexpr int64_t kRoomSliceMs = 5;
// Request sockets are reconnected by the client, not by ZeroMQ (OpenTx): a new one when the old
// one dropped, after kTxBackoffMinMs doubling to kTxBackoffMaxMs while drops come within
// kTxStableMs of each other; a new one too when one has not connected within kTxConnectMs.
constexpr int64_t kTxConnectMs = 2000;
constexpr int64_t kTxBackoffMinMs = 100, kTxBackoffMaxMs = 5000, kTxStableMs = 10000;
// After the answer socket is back, the requests still unanswered are sent again once more this
// much later: answers the server sent before it had attached the new connection were lost too.
// A quarter second: far more than a server takes to attach a new connection (its socket does at
// its next operation). Until then no more requests go to that server than its record keeps past
// the oldest unanswered (PendingRequests::Protect), so a lost answer is still there when asked.
constexpr int64_t kRecheckMs = 250;

constexpr int64_t kIdleDrainMs = 10;

class ClientImpl final : public Client, private internal::Receiver {
 public:
  explicit ClientImpl(const ClientOptions& o)
      : options_(o),
        control_(ctx_, Role::kWorker, ControlOptionsOf(o)),
        cmd_in_(ctx_, zmq::socket_type::pull),
        cmd_out_(ctx_, zmq::socket_type::push) {}

  ~ClientImpl() override {
    {
      std::lock_guard<std::mutex> l(receiver_->mu);  // waits for a receiving caller's slice
      receiver_->client = nullptr;
    }
    stop_ = true;
    if (io_.joinable()) io_.join();
    FailAll(Status::Aborted("client closed"));
    // Calls the I/O thread did not get to send (the scheduler's, or any under send_latency_ms)
    // fail too, rather than wait out their deadlines (found in review).
    auto fail = [](std::unique_ptr<Command> c) { c->part.fs->Complete(c->part.target, Status::Aborted("client closed")); };
    for (auto& d : delayed_) fail(std::move(d.second));
    delayed_.clear();
    for (zmq::message_t m; cmd_in_.recv(m, zmq::recv_flags::dontwait);) {
      Command* raw;
      std::memcpy(&raw, m.data(), sizeof(raw));
      fail(std::unique_ptr<Command>(raw));
    }
  }

  Status Start() {
    if (options_.scheduler.empty()) return Status::InvalidArgument("ClientOptions.scheduler is empty");
    PP_RETURN_IF_ERROR(control_.Register(""));
    const ClusterMap& cm = control_.cluster();
    clock_ = cm.start_clock;  // a restored job resumes at its checkpoint's clock
    // Per server a tx_ socket carries requests from the calling threads (under send_mu_); one rx_
    // socket, connected to every server, receives the replies, which requests address to it by
    // routing id. Callers so send without a hop through the I/O thread, and a waiting caller
    // receives from all servers with one blocking receive.
    rx_id_ = RandomRoutingId("rx-" + std::to_string(control_.rank()));
    ConfigureSocket(rx_, false, -1);
    rx_.set(zmq::sockopt::routing_id, rx_id_);
    // A dropped connection (OnConnectionEvents): rx_ reconnects by itself, under its routing id.
    rx_monitor_ = MonitorOf(rx_, "rx", ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    tx_.resize(cm.servers.size());
    tx_monitors_.resize(cm.servers.size());
    rx_state_.resize(cm.servers.size());
    tx_state_.resize(cm.servers.size());
    max_frame_.assign(cm.servers.size(), 0);
    held_.assign(cm.servers.size(), 0);
    for (size_t s = 0; s < cm.servers.size(); ++s) {
      // Connected to by numeric address, so that its events name it the same way every time.
      addresses_.push_back(NumericTcpAddress(cm.servers[s].address));
      server_of_endpoint_[addresses_[s]] = static_cast<int>(s);
      PP_RETURN_IF_ERROR(OpenTx(s));
      try {
        rx_.connect(addresses_[s]);
      } catch (const zmq::error_t& e) {
        return Status::Unavailable("connect to server " + std::to_string(s) + " at " + cm.servers[s].address + ": " +
                                   e.what());
      }
    }
    PP_RETURN_IF_ERROR(Hello());
    std::string ep = "inproc://pp-cmd-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    cmd_in_.bind(ep);
    cmd_out_.set(zmq::sockopt::sndhwm, 0);
    cmd_out_.connect(ep);
    receiver_->client = this;
    io_ = std::thread([this] { IoLoop(); });
    return Status::OK();
  }

  // A monitor of `sock`'s connections: a PAIR socket that receives the `events` ZeroMQ reports.
  zmq::socket_t MonitorOf(zmq::socket_t& sock, const std::string& name, int events) {
    static std::atomic<uint64_t> serial{0};
    const std::string ep = "inproc://pp-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" + name +
                           "-" + std::to_string(serial++);
    if (zmq_socket_monitor(sock.handle(), ep.c_str(), events) != 0) throw zmq::error_t();
    zmq::socket_t pair(ctx_, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    pair.connect(ep);
    return pair;
  }

  // tx_[s], new: a DEALER to server s, its connection watched. ZeroMQ never reconnects it: a
  // dropped one is replaced by a new socket (OnConnectionEvents), which sends the requests the
  // drop may have lost ahead of any later one. ZeroMQ's own reconnect would send what callers
  // queued after the drop first, out of order (a push tagged with a clock the server has not
  // heard of yet is refused). Start(), or the I/O thread under send_mu_.
  Status OpenTx(size_t s) {
    const std::string& address = addresses_[s];
    tx_state_[s].up = false;
    tx_state_[s].opened_ms = NowMs();
    tx_state_[s].replace_at_ms = -1;
    try {
      zmq::socket_t sock(ctx_, zmq::socket_type::dealer);
      ConfigureSocket(sock, false, -1);
      // (Sends never block: SendDataFrames. A request ZeroMQ cannot take now is held back.)
      sock.set(zmq::sockopt::reconnect_ivl, -1);
      zmq::socket_t monitor =
          MonitorOf(sock, "tx" + std::to_string(s), ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
      sock.connect(address);
      tx_[s] = std::move(sock);
      tx_monitors_[s] = std::move(monitor);
    } catch (const zmq::error_t& e) {
      return Status::Unavailable("connect to server " + std::to_string(s) + " at " + address + ": " + e.what());
    }
    return Status::OK();
  }

  // While Connect waits for the servers (one restoring a large checkpoint answers a hello only
  // once it has read it): the scheduler's news read and heartbeats sent, so that this worker does
  // not look dead meanwhile, and a job aborted meanwhile ends the wait with its reason.
  Status KeepInTouch() {
    for (int i = 0; i < 64; ++i) {
      zmq::pollitem_t it{static_cast<void*>(control_.socket()), 0, ZMQ_POLLIN, 0};
      Poll(&it, 1, 0);
      if (!(it.revents & ZMQ_POLLIN)) break;
      Message m;
      bool changed = false;
      control_.Receive(&m, &changed);  // (no control request is open yet: news only)
    }
    const Membership& mem = control_.membership();
    if (mem.job_state == Membership::kAborted) return Status::Aborted("job aborted: " + mem.reason);
    return control_.Tick();
  }

  // Until every server's reply to a Hello reaches rx_: the server knows the receive socket. All
  // of them within register_timeout_ms.
  Status Hello() {
    std::vector<zmq::message_t> frames;
    std::vector<int64_t> server_clock(tx_.size(), 0);
    Deadline deadline = Deadline::In(options_.register_timeout_ms);
    for (size_t s = 0; s < tx_.size(); ++s) {
      bool answered = false;
      int64_t reopen = NowMs() + kTxConnectMs;
      while (!answered && !deadline.Expired()) {
        PP_RETURN_IF_ERROR(KeepInTouch());
        if (NowMs() > reopen) {  // not connected yet, and ZeroMQ does not try again by itself
          PP_RETURN_IF_ERROR(OpenTx(s));
          reopen = NowMs() + kTxConnectMs;
        }
        Header h;
        h.type = MsgType::kHello;
        h.sender_role = Role::kWorker;
        h.sender_rank = control_.rank();
        h.reply_to = rx_id_;
        h.clock = int64_t(control_.membership().version);  // the server ignores older news of this rank's death
        // 1 + the clock the servers agreed this rank's dead worker reached (0: none), which a
        // server may not have heard of yet (row_begin carries no rows in a hello).
        const auto& agreed = control_.membership().worker_last_clock;
        const size_t r = static_cast<size_t>(control_.rank());
        h.row_begin = r < agreed.size() && agreed[r] >= 0 ? uint64_t(agreed[r]) + 1 : 0;
        bool would_block = false;  // (not connected: tried again, on a new socket after kTxConnectMs)
        PP_RETURN_IF_ERROR(SendDataFrames(tx_[s], EncodeHeaderFrame(h), zmq::message_t(), zmq::message_t(), &would_block));
        zmq::pollitem_t item{static_cast<void*>(rx_), 0, ZMQ_POLLIN, 0};
        Poll(&item, 1, 100);
        while ((item.revents & ZMQ_POLLIN) && RecvFrames(rx_, &frames, kMaxDataFrames + 1)) {
          Message m;
          if (Decode(&frames, &m).ok() && m.header.type == MsgType::kHelloReply &&
              m.header.sender_role == Role::kServer && m.header.sender_rank == static_cast<int>(s)) {
            answered = true;  // (a late answer to an earlier server's hello is dropped)
            max_frame_[s] = m.header.num_rows;
            server_clock[s] = m.header.clock;
          }
          Poll(&item, 1, 0);
        }
      }
      if (!answered)
        return Status::DeadlineExceeded("server " + std::to_string(s) + " at " + control_.cluster().servers[s].address +
                                        " did not answer a hello within " + std::to_string(options_.register_timeout_ms) + " ms");
    }
    // Each server says where this rank's clock is. Ahead of the job's start: this client takes the
    // place of a dead worker, and goes on from the lowest of them (a server ahead, which the dead
    // one's last clock reached, answers what it redoes of that clock without applying it).
    const int64_t lowest = server_clock.empty() ? 0 : *std::min_element(server_clock.begin(), server_clock.end());
    if (lowest > clock_) {
      PP_LOG(Warning) << "worker " << control_.rank() << " takes a dead worker's place at clock " << lowest;
      clock_ = lowest;
      replacement_ = true;
    }
    return Status::OK();
  }

  int rank() const override { return control_.rank(); }
  int num_workers() const override { return control_.cluster().num_workers; }
  int num_servers() const override { return static_cast<int>(control_.cluster().servers.size()); }
  int64_t clock() const override { return clock_; }
  bool replacement() const override { return replacement_; }
  bool checkpoints_enabled() const override { return control_.cluster().checkpoints; }

  Result<Table> CreateTable(const TableSpec& spec) override;
  using Client::Lookup;
  using Client::Pull;
  using Client::PullSlot;
  using Client::PullView;
  using Client::Push;
  Future Push(const Table& t, KeyBuffer keys, std::shared_ptr<const std::vector<float>> grads) override;
  Future Pull(const Table& t, KeyBuffer keys, float* out) override {
    return PullImpl(t, std::move(keys), -1, out, nullptr);
  }
  Future Lookup(const Table& t, KeyBuffer keys, float* out) override {
    return PullImpl(t, std::move(keys), -1, out, nullptr, /*create=*/false);
  }
  Future PullSlot(const Table& t, KeyBuffer keys, int slot, float* out) override {
    return PullImpl(t, std::move(keys), slot, out, nullptr);
  }
  Future PushDense(const Table& t, std::shared_ptr<const std::vector<float>> grads) override;
  Result<std::vector<uint32_t>> GroupByServer(const Table& t, std::vector<Key>* keys) override;
  Future PullView(const Table& t, KeyBuffer keys, PulledRows* out) override {
    return PullImpl(t, std::move(keys), -1, nullptr, out);
  }
  Future PullDense(const Table& t, float* out) override { return PullDenseImpl(t, out, nullptr); }
  Future PullDenseView(const Table& t, PulledRows* out) override { return PullDenseImpl(t, nullptr, out); }
  Future PullDenseImpl(const Table& t, float* out, PulledRows* view);
  std::vector<std::unique_ptr<Command>> RangeCommands(MsgType type, const TableInfo& info, int s) const;
  static void SetPushNorm(const TableSpec& spec, const std::vector<float>& grads,
                          std::vector<std::unique_ptr<Command>>* cmds);
  Status Clock() override;
  Status Barrier() override;
  // Clock() after pushes to a BSP table: waits (request_timeout_ms) until every push and Clock
  // sent before is answered; DeadlineExceeded, sticky, names what was not.
  Status WaitForEarlierPushesAndClocks();
  // Until the requests the I/O thread holds back (send_latency_ms) are sent; DeadlineExceeded
  // (request_timeout_ms from the caller's start) saying how many are left.
  Status WaitForHeldBack(const Deadline& deadline);
  using Client::Checkpoint;
  Status Checkpoint(const std::string& run) override;
  const std::string& restored_run() const override { return control_.cluster().restore_run; }
  Status Finish() override;
  Status Leave(const Status& why) override;
  ClientStats stats() const override {
    ClientStats st;
    {
      std::lock_guard<std::mutex> l(mu_);
      st = stats_;
    }
    std::lock_guard<std::mutex> l(pending_mu_);
    st.unanswered_bytes = pending_.bytes();
    return st;
  }

 private:
  std::shared_ptr<FutureState> NewState(std::string what, int parts);
  std::shared_ptr<FutureState> NewState(const char* kind, const std::string& table, int64_t rows, int parts);
  Future Failed(const Status& st);
  Future FailedPull(const Status& st, PulledRows* view);  // and marks the view failed
  // The error later calls return: a failure that stays (a dead server, a refused clock), or this
  // worker having finished (found in review: calls after Finish() went on, and met servers that
  // took the worker for dead, or none at all).
  Status Sticky() const {
    std::lock_guard<std::mutex> l(mu_);
    return StickyLocked();
  }
  Status StickyLocked() const {  // caller holds mu_
    if (sticky_.ok() && finished_) return Status::FailedPrecondition("this worker has finished (Finish() or Leave()): no calls after it");
    return sticky_;
  }
  // A push refused here, before any server saw it: its Future fails, and so does the Clock()
  // closing its step, stickily, as a server refuses the clock of a push it refused.
  void NoteRefusedPush(const Status& st) {
    std::lock_guard<std::mutex> l(mu_);
    if (refused_push_.ok()) refused_push_ = st;
  }
  Future RefusedPush(const Status& st) {
    NoteRefusedPush(st);
    return Failed(st);
  }
  // Posts commands to the I/O thread, assigning request ids in posting order.
  void Post(std::vector<std::unique_ptr<Command>> cmds);
  // Waits until the commands' payload fits under max_unanswered_mb (or nothing is unanswered) and
  // no server they go to would have more than kMaxUnansweredRequests unanswered, until `deadline`
  // (request_timeout_ms after the call), receiving replies meanwhile; DeadlineExceeded names what
  // it waited for.
  Status WaitForRoom(const std::vector<std::unique_ptr<Command>>& cmds, const Deadline& deadline);
  // Whether the commands fit now (WaitForRoom's test), and if not, what is short and the oldest
  // request whose answer would make room.
  struct Room {
    bool fits = false;
    int full = -1;  // a server with as many requests unanswered as its record of them keeps
    size_t held = 0;
    std::shared_ptr<FutureState> oldest;
  };
  Room CheckRoom(const std::vector<std::unique_ptr<Command>>& cmds);
  // timeout_ms < 0: the client's request_timeout_ms.
  // A request to the scheduler; refused with the sticky error, if any, unless `despite_sticky`
  // (Leave: a worker failing for that error says so).
  Result<Header> ControlCall(Header h, const std::string& what, int64_t timeout_ms = -1, bool despite_sticky = false);
  // Into out, or kept in view (no copy).
  // create false: Lookup (kFlagNoCreate).
  Future PullImpl(const Table& t, KeyBuffer keys, int slot, float* out, PulledRows* view, bool create = true);
  Status CheckTable(const Table& t, const TableInfo** info);

  void IoLoop();
  // Receiving replies, under receiver_->mu.
  void ReceiveFor(const FutureState& fs, int64_t ms) override;
  bool ReceiveOne(int64_t wait_ms);
  void DrainRx();
  void SendCommand(std::unique_ptr<Command> c);
  // Sends again the scheduler requests still unanswered when they are due (see control_requests_).
  void ResendControlRequests();
  void OnConnectionEvents(zmq::pollitem_t* tx_items, const zmq::pollitem_t& rx_item);
  void ResendTo(int s, const char* why, uint64_t below = UINT64_MAX);
  size_t SendPending(int s, bool unsent_only, uint64_t below, size_t* unanswered);
  void FlushHeld();
  void ReplaceDueTx();
  void SendToServer(std::unique_ptr<Command> c);
  void HandleReply(Message& m, int from);
  void OnMembership();
  void FailAll(const Status& st);
  void FailTarget(int target, const Status& st);

  const ClientOptions options_;
  zmq::context_t ctx_;
  ControlChannel control_;  // I/O thread after Start()
  std::vector<zmq::socket_t> tx_;       // requests, from calling threads, under send_mu_
  zmq::socket_t rx_{ctx_, zmq::socket_type::dealer};  // replies from all servers, under receiver_->mu
  // Dropped connections to servers, seen by the I/O thread: tx_'s and rx_'s monitors; rx_'s
  // connections dropped and not back yet; which server an rx_ event's endpoint is.
  std::vector<zmq::socket_t> tx_monitors_;
  zmq::socket_t rx_monitor_;
  std::vector<std::string> addresses_;  // the servers' addresses, numeric
  std::map<std::string, int> server_of_endpoint_;
  struct TxState {
    bool up = false;            // connected (handshake done)
    int64_t opened_ms = 0;
    int64_t replace_at_ms = -1;  // a new socket is due then (-1: none)
    int64_t backoff_ms = 0;
    int64_t replaced_ms = -kTxStableMs;
  };
  std::vector<TxState> tx_state_;  // I/O thread (and Start)
  // The largest frame each server takes (its HelloReply; 0: no limit). Its ZeroMQ drops the
  // connection for a larger one, so such a request is refused here instead.
  std::vector<uint64_t> max_frame_;
  struct RxState {
    bool dropped = false;
    bool resend = false;         // back after a drop: requests below `below` to be sent again ...
    int64_t recheck_at_ms = -1;  // ... and those still unanswered then once more, up to the ones
    int64_t mark_at_ms = -1;     // sent until half way there (`below` is moved on then)
    uint64_t below = 0;
  };
  std::vector<RxState> rx_state_;  // I/O thread
  std::vector<zmq::message_t> frames_;     // under receiver_->mu
  const std::shared_ptr<internal::ReceiverHandle> receiver_ = std::make_shared<internal::ReceiverHandle>();
  std::string rx_id_;                   // rx_'s routing id, named in every request's reply_to
  std::mutex send_mu_;                  // request ids are assigned and sent in one order
  std::vector<char> held_;              // under send_mu_: per server, requests held back (FlushHeld)
  std::atomic<bool> any_held_{false};
  mutable std::mutex pending_mu_;       // guards pending_
  zmq::socket_t cmd_in_;
  std::thread io_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> clock_{0};
  std::atomic<bool> pushed_in_clock_{false};  // a push posted since the last Clock() (Finish)
  std::atomic<bool> has_bsp_table_{false};        // CreateTable gave a BSP table (Clock() settles)
  // Settled clocks (Clock(), under mu_): the pushes posted since the last Clock() (their calls'
  // states, each once), pushes posted in all, and that count when the pushes a Clock() waited for
  // were listed: a push posted after that, by another thread, unsettles the Clock.
  std::vector<std::shared_ptr<FutureState>> clock_pushes_;
  uint64_t pushes_posted_ = 0, clocks_posted_ = 0;
  uint64_t settled_at_pushes_ = 0, settled_at_clocks_ = 0;
  bool replacement_ = false;  // set in Start(): took a dead worker's place mid-job
  std::atomic<bool> finished_{false};
  std::mutex finish_mu_;
  std::atomic<int> held_back_{0};  // server requests posted to the I/O thread, not sent yet

  mutable std::mutex mu_;     // guards the fields below
  zmq::socket_t cmd_out_;     // user threads -> I/O thread
  uint64_t next_request_id_ = 1;
  Status sticky_;
  Status refused_push_;  // under mu_: RefusedPush's first, for the next Clock()
  ClientStats stats_;
  std::map<uint32_t, TableInfo> tables_;

  PendingRequests pending_;            // under pending_mu_
  // I/O thread only.
  std::deque<std::pair<int64_t, std::unique_ptr<Command>>> delayed_;  // send_latency_ms
  // Requests to the scheduler with no answer yet: each is sent again (same request id) every
  // resend interval while a caller waits for it. A request, or its answer, lost with a dropped
  // scheduler connection is so asked again once the channel has reconnected; the scheduler
  // answers a repeat from its record of the request, never runs it twice.
  struct SentRequest {
    Header header;
    int64_t resend_ms;
  };
  std::map<uint64_t, SentRequest> control_requests_;
  int64_t next_resend_ms_ = 0;  // the earliest resend_ms above
  int64_t ResendIntervalMs() const { return std::max(4 * options_.heartbeat_interval_ms, 100); }
};

std::shared_ptr<FutureState> ClientImpl::NewState(std::string what, int parts) {
  auto fs = std::make_shared<FutureState>();
  fs->what = std::move(what);
  fs->remaining = parts;
  fs->remaining_hint = parts;
  fs->default_timeout_ms = options_.request_timeout_ms;
  fs->waiting_on.assign(num_servers() + 1, 0);
  return fs;
}

std::shared_ptr<FutureState> ClientImpl::NewState(const char* kind, const std::string& table, int64_t rows,
                                                  int parts) {
  auto fs = NewState(std::string(), parts);
  fs->what_kind = kind;
  fs->what_table = table;
  fs->what_rows = rows;
  return fs;
}

Future ClientImpl::Failed(const Status& st) {
  auto fs = NewState("", 0);
  fs->status = st;
  fs->remaining_hint = 0;
  return Future(fs);
}

Future ClientImpl::FailedPull(const Status& st, PulledRows* view) {
  if (view) {  // its accessors say why, rather than read as an empty pull
    auto p = std::make_shared<internal::PulledParts>();
    p->refused = st.ToString();
    ClientAccess::parts(view) = std::move(p);
  }
  return Failed(st);
}

void ClientImpl::Post(std::vector<std::unique_ptr<Command>> cmds) {
  // A part over its server's frame limit fails the whole call before any part is sent (a push
  // split over servers is applied on all of them or on none).
  for (const auto& c : cmds) {
    const int s = c->part.target;
    const uint64_t frame = std::max(c->keys.size(), c->values.size());
    if (s == kScheduler || max_frame_[s] == 0 || frame <= max_frame_[s]) continue;
    const Status st = Status::InvalidArgument(std::string(MsgTypeName(c->header.type)) + " of " + std::to_string(frame) +
                                              " bytes to server " + std::to_string(s) + ", over its message limit of " +
                                              std::to_string(max_frame_[s]) + " bytes (pushpull-server --max_message_mb)");
    if (cmds.front()->header.type == MsgType::kPush) NoteRefusedPush(st);
    for (const auto& d : cmds) d->part.fs->Complete(d->part.target, st);
    return;
  }
  // Backpressure: while earlier requests hold too much payload unanswered (a server that takes
  // nothing, or slower than this worker posts), or are as many as a server's record of them
  // keeps, the call waits (below, WaitForRoom), not in memory.
  // One lock around id assignment and sending: a server sees each worker's push ids increase.
  // Pushes, pulls and clocks are stamped with this worker's clock here too, so that with several
  // threads a push sent after a Clock() carries the new clock (the server refuses stale ones).
  // Room is looked at again under it: every request is registered while it is held, so two
  // threads cannot both take the last of a server's room (found in review).
  // The wait for room has one deadline, however often other threads take the room first.
  // Each call's Future learns where replies are received before any of its requests is sent
  // (found in review: set as each was sent, a waiter on the first read it while it was written).
  for (const auto& c : cmds) {
    if (c->part.target == kScheduler || c->part.fs->receiver) continue;
    std::lock_guard<std::mutex> l(c->part.fs->mu);
    c->part.fs->receiver = receiver_;
  }
  const Deadline room_deadline = Deadline::In(options_.request_timeout_ms);
  std::unique_lock<std::mutex> send_lock(send_mu_);
  while (!CheckRoom(cmds).fits) {
    send_lock.unlock();  // (not held while waiting: other threads' calls that fit go on)
    if (Status room = WaitForRoom(cmds, room_deadline); !room.ok()) {
      // Sticky: a push never sent must not be followed by a Clock() that says its step is done
      // (under BSP the clock would close without it); the job fails, and restarts from a checkpoint.
      {
        std::lock_guard<std::mutex> l(mu_);
        if (sticky_.ok()) sticky_ = room;
      }
      for (const auto& d : cmds) d->part.fs->Complete(d->part.target, room);
      return;
    }
    send_lock.lock();
  }
  const bool ticks = !cmds.empty() && cmds[0]->header.type == MsgType::kClock;
  const int64_t clock = ticks ? clock_.load() + 1 : clock_.load();
  if (ticks) {
    {
      std::lock_guard<std::mutex> l(cmds[0]->part.fs->mu);
      cmds[0]->part.fs->what = "clock " + std::to_string(clock);
    }
    std::lock_guard<std::mutex> l(mu_);
    // A push or Clock() another thread posted after this Clock() listed what to wait for: not
    // settled.
    if ((cmds[0]->header.flags & kFlagSettled) &&
        (pushes_posted_ != settled_at_pushes_ || clocks_posted_ != settled_at_clocks_))
      for (auto& c : cmds) c->header.flags &= uint8_t(~kFlagSettled);
    clock_pushes_.clear();
    ++clocks_posted_;
  }
  for (auto& c : cmds) {
    const MsgType type = c->header.type;
    if (type == MsgType::kPush || type == MsgType::kPull || type == MsgType::kClock) c->header.clock = clock;
    {
      std::lock_guard<std::mutex> l(mu_);
      c->header.request_id = next_request_id_++;
      if (c->header.type == MsgType::kPush) {
        ++stats_.pushes, ++pushes_posted_;
        pushed_in_clock_ = true;
        // (Pushes to BSP tables, whose sums the settled Clock() protects, only where one may
        // settle: an app that seldom clocks keeps none of its other pushes. Unanswered others are
        // waited for from pending_.)
        if (c->part.bsp && control_.cluster().survives_worker_death &&
            (clock_pushes_.empty() || clock_pushes_.back() != c->part.fs))
          clock_pushes_.push_back(c->part.fs);
      }
      if (c->header.type == MsgType::kPull) ++stats_.pulls;
      stats_.bytes_sent += c->keys.size() + c->values.size();
    }
    c->header.sender_role = Role::kWorker;
    c->header.sender_rank = control_.rank();
    int t = c->part.target;
    {
      std::lock_guard<std::mutex> l(c->part.fs->mu);  // another thread may wait on it (Finish)
      ++c->part.fs->waiting_on[t == kScheduler ? c->part.fs->waiting_on.size() - 1 : t];
    }
    if (t != kScheduler && options_.send_latency_ms == 0) {
      SendToServer(std::move(c));  // straight from the calling thread
      continue;
    }
    // The scheduler's socket belongs to the I/O thread; injected latency is applied there.
    if (t != kScheduler) ++held_back_;  // until SendCommand has sent it
    Command* raw = c.release();
    zmq::message_t m(&raw, sizeof(raw));
    std::lock_guard<std::mutex> l(mu_);
    cmd_out_.send(m, zmq::send_flags::none);
  }
  if (ticks) {
    clock_ = clock;
    pushed_in_clock_ = false;
  }
}

ClientImpl::Room ClientImpl::CheckRoom(const std::vector<std::unique_ptr<Command>>& cmds) {
  const size_t limit = size_t(options_.max_unanswered_mb) << 20;
  size_t bytes = 0;
  for (const auto& c : cmds) bytes += c->keys.size() + c->values.size();
  Room room;
  std::lock_guard<std::mutex> l(pending_mu_);
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

Status ClientImpl::WaitForRoom(const std::vector<std::unique_ptr<Command>>& cmds, const Deadline& deadline) {
  Room room = CheckRoom(cmds);
  if (room.fits) return Status::OK();
  bool counted = false;
  for (; !room.fits; room = CheckRoom(cmds)) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!sticky_.ok()) return sticky_;  // the job failed meanwhile: say why, not "no room"
      if (!counted) ++stats_.waits_for_room;
      counted = true;
    }
    if (deadline.Expired()) {
      std::string what;
      {
        std::lock_guard<std::mutex> l(cmds.front()->part.fs->mu);
        what = cmds.front()->part.fs->What();
      }
      return Status::DeadlineExceeded(
          what + ": not sent: waited " + std::to_string(options_.request_timeout_ms) + " ms for " +
          (room.full >= 0 ? "answers from server " + std::to_string(room.full) + " (its record keeps the last " +
                                std::to_string(kMaxUnansweredRequests) +
                                " of a worker's requests, which no more may be unanswered or sent past one whose "
                                "answer may have been lost)"
                          : "earlier requests holding " + std::to_string(room.held) +
                                " bytes to be answered (limit: max_unanswered_mb = " +
                                std::to_string(options_.max_unanswered_mb) + ")") +
          "; a server is slow or unreachable");
    }
    // Waiting on the oldest receives replies here, as any waiter does (it stays the caller's), in
    // short slices: answers from other servers make room too.
    if (room.oldest)
      internal::WaitState(room.oldest, std::max<int64_t>(1, std::min<int64_t>(deadline.RemainingMs(), kRoomSliceMs)),
                          /*abandon=*/false)
          .IgnoreError();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // (taken meanwhile: look again)
  }
  return Status::OK();
}

// Registers the request, then sends it on tx_. Caller holds send_mu_.
void ClientImpl::SendToServer(std::unique_ptr<Command> c) {
  const int s = c->part.target;
  const uint64_t id = c->header.request_id;
  c->header.reply_to = rx_id_;
  std::shared_ptr<FutureState> fs = c->part.fs;
  zmq::message_t header = EncodeHeaderFrame(c->header);
  c->part.sent_header.copy(header);
  c->part.sent_keys.copy(c->keys);
  c->part.sent_values.copy(c->values);
  c->part.bytes = c->keys.size() + c->values.size();
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    pending_.emplace(id, std::move(c->part));
  }
  // A failure (a dead server, an aborted job) sets the sticky error before it fails what is
  // pending: one that came in between the caller's check and the line above has not seen this
  // request, so it is failed here. Whoever takes it out of pending_ completes it, once.
  Status st = Sticky();
  // Held back, in order, while ZeroMQ cannot take requests to s (a connection not there: request
  // sockets are not reconnected by ZeroMQ; or the server takes nothing and the queue is full): the
  // I/O thread sends them once it can (FlushHeld), or a new connection does (OnConnectionEvents).
  // Callers never block on a send (only on room, in Post: ClientOptions::max_unanswered_mb).
  bool would_block = held_[s];
  if (st.ok() && !would_block)
    st = SendDataFrames(tx_[s], std::move(header), std::move(c->keys), std::move(c->values), &would_block);
  if (st.ok() && would_block) {
    held_[s] = 1;
    any_held_ = true;
    std::lock_guard<std::mutex> l(pending_mu_);
    auto it = pending_.find(id);
    if (it != pending_.end()) it->second.unsent = true;
  }
  if (!st.ok()) {
    bool mine;
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      mine = pending_.erase(id) > 0;
    }
    if (mine) {
      st = st.Annotate("sending to server " + std::to_string(s));
      if (c->header.type == MsgType::kPush) NoteRefusedPush(st);
      fs->Complete(s, st);
    }
  }
}

Status ClientImpl::CheckTable(const Table& t, const TableInfo** info) {
  std::lock_guard<std::mutex> l(mu_);
  PP_RETURN_IF_ERROR(StickyLocked());
  auto it = tables_.find(t.id);
  if (it == tables_.end() || it->second.spec.name != t.name)
    return Status::NotFound("table '" + t.name + "' was not created through this client");
  // Destinations are sized by this client's record: a handle that says otherwise (another
  // client's, or edited) is refused rather than trusted (found in review).
  const TableSpec& spec = it->second.spec;
  if (t.sparse != spec.sparse || t.dim != spec.dim || (!spec.sparse && t.rows != spec.rows))
    return Status::InvalidArgument("table '" + t.name + "': this handle says " + (t.sparse ? "sparse" : "dense") +
                                   ", dim " + std::to_string(t.dim) + ", rows " + std::to_string(t.rows) +
                                   "; the table is " + (spec.sparse ? "sparse" : "dense") + ", dim " +
                                   std::to_string(spec.dim) + ", rows " + std::to_string(spec.rows) +
                                   " (a handle from another client?)");
  *info = &it->second;
  return Status::OK();
}

Result<Header> ClientImpl::ControlCall(Header h, const std::string& what, int64_t timeout_ms, bool despite_sticky) {
  if (!despite_sticky) PP_RETURN_IF_ERROR(Sticky());
  auto cmd = std::make_unique<Command>();
  cmd->header = std::move(h);
  auto fs = NewState(what, 1);
  cmd->part.fs = fs;
  cmd->part.target = kScheduler;
  cmd->despite_sticky = despite_sticky;
  switch (cmd->header.type) {
    case MsgType::kCreateTable: cmd->part.reply_type = MsgType::kCreateTableReply; break;
    case MsgType::kBarrier: cmd->part.reply_type = MsgType::kBarrierReply; break;
    case MsgType::kCheckpoint: cmd->part.reply_type = MsgType::kCheckpointReply; break;
    default: cmd->part.reply_type = MsgType::kDoneReply; break;
  }
  std::vector<std::unique_ptr<Command>> v;
  v.push_back(std::move(cmd));
  Post(std::move(v));
  Status st = timeout_ms < 0 ? Future(fs).Wait() : Future(fs).WaitFor(timeout_ms);
  if (!st.ok()) return st;
  return fs->reply;
}

Result<Table> ClientImpl::CreateTable(const TableSpec& spec) {
  PP_RETURN_IF_ERROR(spec.Validate());
  Header h;
  h.type = MsgType::kCreateTable;
  h.spec = spec;
  auto r = ControlCall(h, "create table '" + spec.name + "'");
  if (!r.ok()) return r.status();
  const TableInfo& info = r->info;
  // The scheduler's partition indexes this client's per-server arrays: check it first.
  const size_t S = static_cast<size_t>(num_servers());
  bool fits = info.spec.sparse ? info.bucket_owner.size() == TableInfo::kBuckets
                               : info.row_offsets.size() == S + 1 && info.row_offsets.front() == 0 &&
                                     info.row_offsets.back() == info.spec.rows;
  for (size_t i = 1; fits && i < info.row_offsets.size(); ++i) fits = info.row_offsets[i - 1] <= info.row_offsets[i];
  for (size_t i = 0; fits && i < info.bucket_owner.size(); ++i) fits = info.bucket_owner[i] < S;
  if (!fits)
    return Status::Corruption("create table '" + spec.name + "': the scheduler's partition does not fit " +
                              std::to_string(S) + " servers");
  if (info.spec.consistency.model == Consistency::kBsp) has_bsp_table_ = true;
  Table t;
  t.id = info.id;
  t.name = info.spec.name;
  t.sparse = info.spec.sparse;
  t.rows = info.spec.rows;
  t.dim = info.spec.dim;
  t.consistency = info.spec.consistency;
  std::lock_guard<std::mutex> l(mu_);
  tables_.emplace(t.id, info);  // never overwritten: other threads may be reading it (CheckTable)
  return t;
}

namespace {
// Which server holds each of a call's keys. `owner` is filled with more than one server only;
// count[s] is server s's number of keys and first[s] where they start in server order. When the
// owners never go down (keys in server order, as GroupByServer leaves them; always with one
// server) `grouped` is set: server s's keys are then [first[s], first[s] + count[s]) as given.
struct KeysByServer {
  std::vector<int> owner;
  std::vector<size_t> first, count;
  bool grouped = true;
};
// A keyed pull's reply of several stripes (kFlagByStripe): each stripe's rows in turn, each in
// the request's key order. Which of the request's keys each reply row is.
Status KeysOfStripeRows(const Message& m, const Part& part, std::vector<uint32_t>* key_of_row) {
  const Header& h = m.header;
  const size_t n = part.sent_keys.size() / sizeof(Key);
  auto unfit = [&](const std::string& why) {
    return Status::Corruption("pull reply by stripe of " + std::to_string(h.row_begin) + " stripes does not fit its request: " + why);
  };
  if (!part.sparse || (h.flags & kFlagRange) || n != part.rows || h.row_begin < 2 || h.row_begin > kMaxValueFrames)
    return unfit("not a keyed pull of a sparse table, or no such stripe count");
  const int stripes = static_cast<int>(h.row_begin);
  const char* keys = static_cast<const char*>(part.sent_keys.data());  // (a small frame may sit unaligned)
  std::vector<uint8_t> stripe_of(n);
  std::vector<uint32_t> first(stripes + 1, 0);
  for (size_t j = 0; j < n; ++j) {
    Key k;
    std::memcpy(&k, keys + j * sizeof(Key), sizeof(Key));
    ++first[(stripe_of[j] = static_cast<uint8_t>(TableInfo::SparseStripeOf(k, stripes))) + 1];
  }
  // A frame a stripe with rows, in stripe order, each of its rows.
  size_t frame = 0;
  for (int s = 0; s < stripes; ++s) {
    if (first[s + 1] == 0) continue;
    if (frame >= m.num_value_frames() || m.value_frame(frame).size() != first[s + 1] * size_t(part.dim) * sizeof(float))
      return unfit("its frames are not the stripes' rows");
    ++frame;
  }
  if (frame != m.num_value_frames()) return unfit("more frames than stripes with rows");
  for (int s = 0; s < stripes; ++s) first[s + 1] += first[s];
  key_of_row->resize(n);
  for (size_t j = 0; j < n; ++j) (*key_of_row)[first[stripe_of[j]]++] = static_cast<uint32_t>(j);
  return Status::OK();
}

KeysByServer SplitByServer(const TableInfo& info, const std::vector<Key>& keys, int S) {
  KeysByServer k;
  k.first.assign(S, 0);
  k.count.assign(S, 0);
  if (S == 1) {
    k.count[0] = keys.size();
    return k;
  }
  k.owner.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const int o = k.owner[i] = info.OwnerOf(keys[i]);
    if (i && o < k.owner[i - 1]) k.grouped = false;
    ++k.count[o];
  }
  for (int s = 1; s < S; ++s) k.first[s] = k.first[s - 1] + k.count[s - 1];
  return k;
}
}  // namespace

Future ClientImpl::Push(const Table& t, KeyBuffer kbuf, std::shared_ptr<const std::vector<float>> vbuf) {
  const TableInfo* info;
  Status st = CheckTable(t, &info);
  if (!st.ok()) return Failed(st);
  if (!kbuf) return RefusedPush(Status::InvalidArgument("push to '" + t.name + "': no key buffer (null)"));
  const std::vector<Key>& keys = *kbuf;
  const uint32_t dim = info->spec.dim;
  if (keys.size() > kMaxKeysPerMessage)
    return RefusedPush(Status::InvalidArgument("push to '" + t.name + "': " + std::to_string(keys.size()) +
                                          " keys, at most " + std::to_string(kMaxKeysPerMessage) + " per call"));
  if (!vbuf || vbuf->size() != keys.size() * dim)
    return RefusedPush(Status::InvalidArgument("push to '" + t.name + "': " + std::to_string(keys.size()) +
                                          " keys of dim " + std::to_string(dim) + " need " +
                                          std::to_string(keys.size() * dim) + " floats, got " +
                                          std::to_string(vbuf ? vbuf->size() : 0)));
  for (Key k : keys)
    if (!info->spec.sparse && k >= info->spec.rows)
      return RefusedPush(Status::InvalidArgument("push to '" + t.name + "': row " + std::to_string(k) +
                                            " out of range [0, " + std::to_string(info->spec.rows) + ")"));
  const int S = num_servers();
  // Keys in server order -> each server its slices of the caller's buffers, zero-copy; otherwise
  // each server's rows gathered.
  const KeysByServer by = SplitByServer(*info, keys, S);
  std::vector<std::unique_ptr<Command>> cmds;
  auto make = [&](int s, zmq::message_t kf, zmq::message_t vf, uint64_t n, bool continues) {
    auto c = std::make_unique<Command>();
    c->header.type = MsgType::kPush;
    if (continues) c->header.flags = kFlagContinues;
    c->header.table = t.id;
    c->header.clock = clock_;
    c->header.num_keys = n;
    c->header.dim = dim;
    c->keys = std::move(kf);
    c->values = std::move(vf);
    c->part.target = s;
    c->part.reply_type = MsgType::kPushReply;
    c->part.bsp = info->spec.consistency.model == Consistency::kBsp;
    cmds.push_back(std::move(c));
  };
  // A server's n keys from `ks` and their rows from `vs`: a request per TableInfo::KeysPerRequest
  // keys (sparse: a block's, so that the server applies one while the next arrives).
  auto make_requests = [&](int s, const Key* ks, const float* vs, size_t n, const std::shared_ptr<const void>& kown,
                           const std::shared_ptr<const void>& vown) {
    for (size_t j = 0, per = info->KeysPerRequest(n); j < n; j += per) {
      const size_t m = std::min(per, n - j);
      make(s, ZeroCopyFrame(ks + j, m * sizeof(Key), kown), ZeroCopyFrame(vs + j * dim, m * dim * sizeof(float), vown), m,
           j > 0);
    }
  };
  if (by.grouped) {
    for (int s = 0; s < S; ++s) {
      const size_t i = by.first[s], n = by.count[s];
      make_requests(s, kbuf->data() + i, vbuf->data() + i * dim, n, kbuf, vbuf);
    }
  } else {
    // Gather each server's rows (one pass; exact sizes, so no regrowth copies).
    std::vector<size_t> fill(S, 0);
    std::vector<std::vector<Key>> ks(S);
    std::vector<FloatArray> vs(S);
    for (int s = 0; s < S; ++s) {
      ks[s].resize(by.count[s]);
      vs[s].resize(by.count[s] * dim);
    }
    const float* src = vbuf->data();
    for (size_t i = 0; i < kbuf->size(); ++i) {
      const int o = by.owner[i];
      ks[o][fill[o]] = (*kbuf)[i];
      std::memcpy(vs[o].data() + fill[o] * dim, src + i * dim, dim * sizeof(float));
      ++fill[o];
    }
    for (int s = 0; s < S; ++s) {
      if (ks[s].empty()) continue;
      auto kk = std::make_shared<std::vector<Key>>(std::move(ks[s]));
      auto vv = std::make_shared<FloatArray>(std::move(vs[s]));
      make_requests(s, kk->data(), vv->data(), kk->size(), kk, vv);
    }
  }
  SetPushNorm(info->spec, *vbuf, &cmds);
  auto fs = NewState("push to table", t.name, static_cast<int64_t>(kbuf->size()),
                     static_cast<int>(cmds.size()));
  for (auto& c : cmds) c->part.fs = fs;
  Post(std::move(cmds));
  return Future(fs);
}

Result<std::vector<uint32_t>> ClientImpl::GroupByServer(const Table& t, std::vector<Key>* keys) {
  const TableInfo* info;
  PP_RETURN_IF_ERROR(CheckTable(t, &info));
  if (keys->size() > kMaxKeysPerMessage)
    return Status::InvalidArgument("grouping keys of '" + t.name + "': " + std::to_string(keys->size()) +
                                   " keys, at most " + std::to_string(kMaxKeysPerMessage) + " per call");
  // A counting sort by owner (stable): each key to the next place of its server's part.
  KeysByServer by = SplitByServer(*info, *keys, num_servers());
  std::vector<uint32_t> order(keys->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  if (by.grouped) return order;
  std::vector<Key> grouped(keys->size());
  for (size_t i = 0; i < keys->size(); ++i) {
    const size_t at = by.first[by.owner[i]]++;
    order[at] = static_cast<uint32_t>(i);
    grouped[at] = (*keys)[i];
  }
  *keys = std::move(grouped);
  return order;
}

Future ClientImpl::PullImpl(const Table& t, KeyBuffer kbuf, int slot, float* out, PulledRows* view, bool create) {
  if (view) ClientAccess::parts(view).reset();  // nothing of an earlier pull stays readable
  auto Failed = [&](const Status& st) { return FailedPull(st, view); };  // (early returns mark the view failed)
  const TableInfo* info;
  Status st = CheckTable(t, &info);
  if (!st.ok()) return Failed(st);
  if (!kbuf) return Failed(Status::InvalidArgument("pull from '" + t.name + "': no key buffer (null)"));
  if (!out && !view && !kbuf->empty())
    return Failed(Status::InvalidArgument("pull from '" + t.name + "': no destination (null)"));
  const std::vector<Key>& keys = *kbuf;
  const uint32_t dim = info->spec.dim;
  if (keys.size() > kMaxKeysPerMessage)
    return Failed(Status::InvalidArgument("pull from '" + t.name + "': " + std::to_string(keys.size()) +
                                          " keys, at most " + std::to_string(kMaxKeysPerMessage) + " per call"));
  for (Key k : keys)
    if (!info->spec.sparse && k >= info->spec.rows)
      return Failed(Status::InvalidArgument("pull from '" + t.name + "': row " + std::to_string(k) +
                                            " out of range [0, " + std::to_string(info->spec.rows) + ")"));
  const int S = num_servers();
  const size_t total_keys = keys.size();
  // Keys in server order (GroupByServer; always with one server): each server is sent its slice
  // of the one key buffer, zero-copy, and its rows go to consecutive places from `first(s)`.
  // Otherwise its keys are gathered, and where each of its rows goes is listed (pos).
  const KeysByServer by = SplitByServer(*info, keys, S);
  const std::vector<size_t>& count = by.count;
  auto first = [&](int s) { return by.grouped ? by.first[s] : 0; };  // (else placed by `pos`)
  // Server s's keys: from ks_at[s], kept alive by ks_own[s].
  std::vector<const Key*> ks_at(S);
  std::vector<std::shared_ptr<const void>> ks_own(S);
  std::vector<std::vector<uint32_t>> pos(S);
  if (by.grouped) {
    for (int s = 0; s < S; ++s) {
      ks_at[s] = kbuf->data() + first(s);
      ks_own[s] = kbuf;
    }
  } else {
    std::vector<std::shared_ptr<std::vector<Key>>> ks(S);
    for (int s = 0; s < S; ++s) {
      ks[s] = std::make_shared<std::vector<Key>>();
      ks[s]->reserve(count[s]);
      pos[s].reserve(count[s]);
    }
    for (size_t i = 0; i < total_keys; ++i) {
      ks[by.owner[i]]->push_back((*kbuf)[i]);
      pos[by.owner[i]].push_back(static_cast<uint32_t>(i));
    }
    for (int s = 0; s < S; ++s) {
      ks_at[s] = ks[s]->data();
      ks_own[s] = ks[s];
    }
  }
  std::shared_ptr<internal::PulledParts> parts;
  if (view) {
    parts = std::make_shared<internal::PulledParts>();
    parts->keyed = true;
    parts->rows = total_keys;
    parts->dim = dim;
    ClientAccess::parts(view) = parts;
  }
  // A request per TableInfo::KeysPerRequest keys of each server's (sparse: a block's): keys
  // [j, j + m) of its, whose rows go to consecutive places from first(s) + j, or (gathered keys)
  // to places pos[s][j, j + m).
  std::vector<std::unique_ptr<Command>> cmds;
  for (int s = 0; s < S; ++s) {
    for (size_t j = 0, n = count[s], per = info->KeysPerRequest(n); j < n; j += per) {
      const size_t m = std::min(per, n - j), at = by.grouped ? first(s) + j : 0;  // (else placed by positions)
      auto c = std::make_unique<Command>();
      c->header.type = MsgType::kPull;
      c->header.table = t.id;
      c->header.clock = clock_;
      c->header.num_keys = m;
      c->header.dim = dim;
      c->header.slot = slot;
      if (!create && info->spec.sparse) c->header.flags |= kFlagNoCreate;
      c->keys = ZeroCopyFrame(ks_at[s] + j, m * sizeof(Key), ks_own[s]);
      c->part.target = s;
      c->part.reply_type = MsgType::kPullReply;
      c->part.out = out ? out + at * dim : nullptr;
      c->part.rows = m;
      c->part.dim = dim;
      c->part.sparse = info->spec.sparse;
      if (!pos[s].empty()) c->part.positions.assign(pos[s].begin() + j, pos[s].begin() + j + m);
      if (parts) {
        c->part.view = parts;
        c->part.view_index = parts->frames.size();
        parts->frames.emplace_back();
        parts->first_row.push_back(at);
        parts->positions.push_back(std::move(c->part.positions));
        parts->key_of_row.emplace_back();
      }
      cmds.push_back(std::move(c));
    }
  }
  auto fs = NewState(slot < 0 ? "pull from table" : "pull of optimizer slot from", t.name,
                     static_cast<int64_t>(total_keys),
                     static_cast<int>(cmds.size()));
  fs->writes_destination = out != nullptr;
  for (auto& c : cmds) c->part.fs = fs;
  Post(std::move(cmds));
  return Future(fs);
}

// A table that clips pushes by their L2 norm (OptimizerConfig::clip_norm) clips the whole push:
// split over servers (and blocks), each part carries the whole one's norm, so that every server scales its
// part alike (a part clipped by its own norm would change the push's direction).
void ClientImpl::SetPushNorm(const TableSpec& spec, const std::vector<float>& grads,
                             std::vector<std::unique_ptr<Command>>* cmds) {
  if (spec.optimizer.clip_norm <= 0 || cmds->size() < 2) return;
  const float norm = static_cast<float>(std::sqrt(opt::SquaredNorm(grads.data(), grads.size())));
  if (!std::isfinite(norm)) return;  // (a non-finite gradient: each server refuses its part)
  for (auto& c : *cmds) c->header.push_norm = norm;
}

Future ClientImpl::PushDense(const Table& t, std::shared_ptr<const std::vector<float>> vbuf) {
  const TableInfo* info;
  Status st = CheckTable(t, &info);
  if (!st.ok()) return Failed(st);
  if (info->spec.sparse) return RefusedPush(Status::InvalidArgument("PushDense on sparse table '" + t.name + "'"));
  const uint32_t dim = info->spec.dim;
  if (!vbuf || vbuf->size() != info->spec.rows * dim)
    return RefusedPush(Status::InvalidArgument("push to '" + t.name + "': table holds " +
                                          std::to_string(info->spec.rows * dim) + " floats, got " +
                                          std::to_string(vbuf ? vbuf->size() : 0)));
  std::vector<std::unique_ptr<Command>> cmds;
  for (int s = 0; s < num_servers(); ++s) {
    for (auto& c : RangeCommands(MsgType::kPush, *info, s)) {
      const uint64_t b = c->header.row_begin, n = c->header.num_rows;
      c->values = ZeroCopyFrame(vbuf->data() + b * dim, n * dim * sizeof(float), vbuf);
      cmds.push_back(std::move(c));
    }
  }
  SetPushNorm(info->spec, *vbuf, &cmds);
  auto fs = NewState("dense push to table", t.name, -1, static_cast<int>(cmds.size()));
  for (auto& c : cmds) c->part.fs = fs;
  Post(std::move(cmds));
  return Future(fs);
}

// A push or pull of server s's whole row range of a dense table: a request per block
// (TableInfo::BlockRows), in row order, so that the server applies or reads one block while the
// next arrives (a pull's first block comes back before the server has read its last one); none
// when s owns no rows.
std::vector<std::unique_ptr<Command>> ClientImpl::RangeCommands(MsgType type, const TableInfo& info, int s) const {
  std::vector<std::unique_ptr<Command>> cmds;
  const uint64_t first = info.row_offsets[s], end = info.row_offsets[s + 1], block = info.BlockRows(s);
  for (uint64_t b = first; b < end; b += block) {
    auto c = std::make_unique<Command>();
    c->header.type = type;
    c->header.flags = kFlagRange | (type == MsgType::kPush && b > first ? kFlagContinues : 0);
    c->header.table = info.id;
    c->header.clock = clock_;
    c->header.row_begin = b;
    c->header.num_rows = std::min(block, end - b);
    c->header.dim = info.spec.dim;
    c->part.target = s;
    c->part.reply_type = type == MsgType::kPush ? MsgType::kPushReply : MsgType::kPullReply;
    c->part.bsp = type == MsgType::kPush && info.spec.consistency.model == Consistency::kBsp;
    cmds.push_back(std::move(c));
  }
  return cmds;
}

Future ClientImpl::PullDenseImpl(const Table& t, float* out, PulledRows* view) {
  if (view) ClientAccess::parts(view).reset();
  auto Failed = [&](const Status& st) { return FailedPull(st, view); };  // (early returns mark the view failed)
  const TableInfo* info;
  Status st = CheckTable(t, &info);
  if (!st.ok()) return Failed(st);
  if (!out && !view) return Failed(Status::InvalidArgument("PullDense from '" + t.name + "': no destination (null)"));
  if (info->spec.sparse) return Failed(Status::InvalidArgument("PullDense on sparse table '" + t.name + "'"));
  const uint32_t dim = info->spec.dim;
  std::shared_ptr<internal::PulledParts> parts;
  if (view) {
    parts = std::make_shared<internal::PulledParts>();
    parts->rows = info->spec.rows;
    parts->dim = dim;
    ClientAccess::parts(view) = parts;
  }
  std::vector<std::unique_ptr<Command>> cmds;
  for (int s = 0; s < num_servers(); ++s) {
    for (auto& c : RangeCommands(MsgType::kPull, *info, s)) {
      const uint64_t b = c->header.row_begin;
      if (parts) {
        c->part.view = parts;
        c->part.view_index = parts->frames.size();
        parts->frames.emplace_back();
        parts->first_row.push_back(b);
      }
      c->part.out = out ? out + b * dim : nullptr;
      c->part.rows = c->header.num_rows;
      c->part.dim = dim;
      cmds.push_back(std::move(c));
    }
  }
  auto fs = NewState("dense pull from table", t.name, -1, static_cast<int>(cmds.size()));
  fs->writes_destination = out != nullptr;
  for (auto& c : cmds) c->part.fs = fs;
  Post(std::move(cmds));
  return Future(fs);
}

Status ClientImpl::Clock() {
  PP_RETURN_IF_ERROR(Sticky());
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!refused_push_.ok()) {
      sticky_ = Status(refused_push_.code(), "clock " + std::to_string(clock_.load()) +
                                                 " is not done: a push of it was refused before it was sent (" +
                                                 refused_push_.message() + ")");
      return sticky_;
    }
  }
  // A worker with a BSP table settles its Clock: sent once every push of the clock succeeded and
  // every Clock before it was answered, by every server, so that each server holds all this
  // worker's pushes of the clocks it closes. Should this worker die while its Clock reaches some
  // servers and not others, those it did not reach can then count it as the others do, and the
  // clock's mean (its sums and its divisor) is the same on every server (DESIGN.md, "A worker
  // dying between its clocks"). It costs the caller one round trip a clock with pushes (under BSP
  // the next pull waits for every worker's Clock anyway), and only in a job that goes on after a
  // worker dies: elsewhere a death ends the job.
  // (A push to a BSP table needs one from CreateTable: CheckTable.)
  const bool settle = control_.cluster().survives_worker_death && has_bsp_table_;
  if (settle) PP_RETURN_IF_ERROR(WaitForEarlierPushesAndClocks());
  auto fs = NewState("clock", num_servers());
  std::vector<std::unique_ptr<Command>> cmds;
  for (int s = 0; s < num_servers(); ++s) {
    auto c = std::make_unique<Command>();
    c->header.type = MsgType::kClock;  // stamped with the next clock by Post, which advances it
    if (settle) c->header.flags = kFlagSettled;
    c->part.fs = fs;
    c->part.target = s;
    c->part.reply_type = MsgType::kClockReply;
    cmds.push_back(std::move(c));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.clocks;
  }
  Post(std::move(cmds));
  return Sticky();  // (a clock that found no room is not sent: the error Post made sticky)
}

Status ClientImpl::WaitForHeldBack(const Deadline& deadline) {
  while (held_back_.load() > 0) {
    if (deadline.Expired())
      return Status::DeadlineExceeded(std::to_string(held_back_.load()) + " requests still held back (send_latency_ms) after " +
                                      std::to_string(options_.request_timeout_ms) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::OK();
}

Status ClientImpl::WaitForEarlierPushesAndClocks() {
  const Deadline deadline = Deadline::In(options_.request_timeout_ms);
  auto fail = [&](Code code, const std::string& what) {
    Status st(code, "clock " + std::to_string(clock_.load()) + " not sent: " + what +
                        " (in a job that goes on after a worker dies, a worker with a BSP table sends its Clock() "
                        "once its pushes have succeeded on every server)");
    std::lock_guard<std::mutex> l(mu_);
    if (sticky_.ok()) sticky_ = st;  // its step's pushes may be lost: the clock must not close without them
    return st;
  };
  if (Status sent = WaitForHeldBack(deadline); !sent.ok()) return fail(sent.code(), sent.message());
  // This clock's pushes to BSP tables (answered or not), then every push and Clock() unanswered.
  std::vector<std::shared_ptr<FutureState>> pushes, clocks;
  {
    std::lock_guard<std::mutex> l(mu_);
    pushes = clock_pushes_;
    settled_at_pushes_ = pushes_posted_;
    settled_at_clocks_ = clocks_posted_;
  }
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    for (auto& [id, part] : pending_) {
      if (part.target == kScheduler) continue;
      if (part.reply_type == MsgType::kPushReply) pushes.push_back(part.fs);
      if (part.reply_type == MsgType::kClockReply) clocks.push_back(part.fs);
    }
  }
  for (const auto* list : {&pushes, &clocks}) {
    for (auto& fs : *list) {
      Status st = internal::WaitState(fs, std::max<int64_t>(1, deadline.RemainingMs()), /*abandon=*/false);
      bool unanswered;
      Status result;
      {
        std::lock_guard<std::mutex> l(fs->mu);
        unanswered = fs->remaining > 0;
        result = fs->answered_status;  // (not DeadlineExceeded for a caller that gave up on an answered push)
      }
      // ("dense push to table 'w': no answer within ..."; a push refused, or given up unsent)
      if (unanswered) return fail(Code::kDeadlineExceeded, st.message());
      if (!result.ok())
        return fail(result.code(), (list == &pushes ? "a push of it failed: " : "an earlier clock failed: ") + result.message());
    }
  }
  return Status::OK();
}

Status ClientImpl::Barrier() {
  Header h;
  h.type = MsgType::kBarrier;
  auto r = ControlCall(h, "barrier at clock " + std::to_string(clock_));
  return r.status();
}

Status ClientImpl::Checkpoint(const std::string& run) {
  if (run.size() > kMaxRunText || run.find('\n') != std::string::npos)
    return Status::InvalidArgument("checkpoint: the run's description must be one line of at most " +
                                   std::to_string(kMaxRunText) + " bytes");
  Header h;
  h.type = MsgType::kCheckpoint;
  h.clock = clock_;
  h.address = run;
  // (Past the scheduler's two phases, each of which answers it when it expires.)
  const int64_t wait = options_.checkpoint_timeout_ms > 0
                           ? options_.checkpoint_timeout_ms
                           : 2 * control_.cluster().checkpoint_timeout_ms + options_.request_timeout_ms;
  auto r = ControlCall(h, "checkpoint at clock " + std::to_string(clock_), wait);
  return r.status();
}

Status ClientImpl::Finish() {
  std::lock_guard<std::mutex> once(finish_mu_);  // two threads at once: the second finds it done
  if (finished_) return Status::OK();  // once is enough
  // Pushes in a clock left open would count, under BSP, only on the servers they went to (a
  // server counts a finished worker in a clock it pushed to there); closed, the worker counts in
  // that clock's mean everywhere, as any worker whose clock passed it.
  if (pushed_in_clock_) PP_RETURN_IF_ERROR(Clock().Annotate("finish: closing the clock of its last pushes"));
  // The scheduler's "done" travels on another connection than the data: without this wait a
  // server could hear of it before this worker's last pushes and clocks, and drop them. First
  // the requests the I/O thread still holds back (send_latency_ms), then every open one; the
  // user's own Futures are not given up on if this times out.
  const Deadline deadline = Deadline::In(options_.request_timeout_ms);
  PP_RETURN_IF_ERROR(WaitForHeldBack(deadline).Annotate("finish"));
  std::vector<std::shared_ptr<FutureState>> open;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    for (auto& [id, part] : pending_)
      if (part.target != kScheduler) open.push_back(part.fs);
  }
  for (auto& fs : open) {
    Status st = internal::WaitState(fs, std::max<int64_t>(1, deadline.RemainingMs()), /*abandon=*/false);
    // Only a call still unanswered fails it: one its caller gave up on, answered since, ends
    // DeadlineExceeded too (found in review: Finish then failed without telling the scheduler).
    std::lock_guard<std::mutex> l(fs->mu);
    if (fs->remaining > 0) return st.Annotate("finish");
  }
  Header h;
  h.type = MsgType::kDone;
  auto r = ControlCall(h, "finish");
  if (r.ok()) finished_ = true;
  return r.status();
}

Status ClientImpl::Leave(const Status& why) {
  // Not under finish_mu_: a Finish() in progress may wait on slow servers far longer than this
  // call's 2 s (a worker stopped by a signal while it finishes).
  if (finished_) return Status::OK();
  Header h;
  h.type = MsgType::kDone;  // a "done" that carries an error: this worker stops, failed
  h.SetStatus(why.ok() ? Status::Aborted("left the job") : why);
  // Also after a sticky error (one the scheduler may not know of, such as a push that found no
  // room): it is what the job should hear.
  auto r = ControlCall(h, "leave", 2000, /*despite_sticky=*/true);
  if (r.ok()) finished_ = true;
  return r.status();
}

void ClientImpl::IoLoop() {
  SetThreadName("pp-client-io");
  std::vector<zmq::pollitem_t> items;
  while (!stop_) {
    // The control socket, commands, then the connection monitors (tx_'s are replaced with their
    // sockets).
    items.assign({{static_cast<void*>(control_.socket()), 0, ZMQ_POLLIN, 0},
                  {static_cast<void*>(cmd_in_), 0, ZMQ_POLLIN, 0},
                  {static_cast<void*>(rx_monitor_), 0, ZMQ_POLLIN, 0}});
    for (auto& m : tx_monitors_) items.push_back({static_cast<void*>(m), 0, ZMQ_POLLIN, 0});
    // Replies nobody waits for (a push never waited on) are drained every kDrainMs while requests
    // to servers are open and no waiting caller receives, and within kIdleDrainMs otherwise. (Not
    // for the scheduler's, which come on its socket, polled here: a Barrier() or Checkpoint()
    // waiting minutes for the others woke this thread every 2 ms; found in review.)
    int64_t timeout = std::min<int64_t>(control_.MsUntilTick(), kIdleDrainMs);
    if (!receiver_->waiter_receiving.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> l(pending_mu_);
      if (pending_.to_servers() > 0) timeout = std::min<int64_t>(timeout, kDrainMs);
    }
    if (!delayed_.empty()) timeout = std::max<int64_t>(0, std::min(timeout, delayed_.front().first - NowMs()));
    Poll(items.data(), items.size(), timeout);
    OnConnectionEvents(&items[3], items[2]);
    ReplaceDueTx();
    FlushHeld();
    if (items[1].revents & ZMQ_POLLIN) {
      for (int i = 0; i < 1024; ++i) {
        zmq::message_t m;
        if (!cmd_in_.recv(m, zmq::recv_flags::dontwait)) break;
        Command* raw;
        std::memcpy(&raw, m.data(), sizeof(raw));
        std::unique_ptr<Command> c(raw);
        {
          // The Command was posted under mu_; taking the lock makes that ordering explicit
          // (ZeroMQ's own hand-off is invisible to ThreadSanitizer). Uncontended: cheap.
          std::lock_guard<std::mutex> l(mu_);
        }
        if (options_.send_latency_ms > 0) delayed_.emplace_back(NowMs() + options_.send_latency_ms, std::move(c));
        else SendCommand(std::move(c));
        if (control_.MsUntilTick() == 0) control_.Tick().IgnoreError();
      }
    }
    while (!delayed_.empty() && delayed_.front().first <= NowMs()) {
      SendCommand(std::move(delayed_.front().second));
      delayed_.pop_front();
    }
    {
      std::unique_lock<std::mutex> rl(receiver_->mu, std::try_to_lock);
      if (rl.owns_lock()) DrainRx();  // else a waiting caller is receiving
    }
    if (items[0].revents & ZMQ_POLLIN) {
      for (int i = 0; i < 64; ++i) {
        Message m;
        bool changed = false;
        bool got = control_.Receive(&m, &changed);
        if (changed) OnMembership();
        if (got) HandleReply(m, kScheduler);
        zmq::pollitem_t it{static_cast<void*>(control_.socket()), 0, ZMQ_POLLIN, 0};
        Poll(&it, 1, 0);
        if (!(it.revents & ZMQ_POLLIN)) break;
      }
    }
    Status st = control_.Tick();
    if (!st.ok()) FailAll(st);
    if (!control_requests_.empty()) ResendControlRequests();
  }
}

// A connection to a server that dropped may have lost requests on their way and answers on theirs.
// Requests: tx_[s] is replaced (ReplaceDueTx) and every unanswered request to s is sent on the
// new socket again, oldest first, before anything sent later (callers wait on send_mu_). Answers:
// once rx_ is connected to s again, the requests to s still unanswered are sent again, and
// kRecheckMs later those still unanswered once more, the ones sent in the first half of that
// while included: the server may answer on the old connection until its socket has taken the
// new one (found in review). The server answers a repeat once and never runs it twice
// (server/request_record.h).
void ClientImpl::OnConnectionEvents(zmq::pollitem_t* tx_items, const zmq::pollitem_t& rx_item) {
  auto next_event = [](zmq::socket_t& monitor, uint16_t* event, std::string* endpoint) {
    zmq::message_t a, b;
    if (!monitor.recv(a, zmq::recv_flags::dontwait)) return false;
    if (a.size() < sizeof(uint16_t) || !a.more() || !monitor.recv(b)) return false;
    std::memcpy(event, a.data(), sizeof(uint16_t));
    endpoint->assign(static_cast<const char*>(b.data()), b.size());
    return true;
  };
  uint16_t event = 0;
  std::string endpoint;
  const int64_t now = NowMs();
  // Replacements in a row (a server gone, or one whose ZeroMQ drops the connection for what is
  // sent again) back off.
  auto schedule_replace = [now](TxState& tx) {
    tx.backoff_ms = now - tx.replaced_ms < kTxStableMs
                        ? std::min(std::max(2 * tx.backoff_ms, kTxBackoffMinMs), kTxBackoffMaxMs)
                        : 0;
    tx.replace_at_ms = now + tx.backoff_ms;
    tx.up = false;
  };
  for (size_t s = 0; s < tx_monitors_.size(); ++s) {
    if (!(tx_items[s].revents & ZMQ_POLLIN)) continue;
    TxState& tx = tx_state_[s];
    while (next_event(tx_monitors_[s], &event, &endpoint)) {
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) tx.up = true;
      else if (event == ZMQ_EVENT_DISCONNECTED && tx.replace_at_ms < 0) schedule_replace(tx);
    }
  }
  for (size_t s = 0; s < tx_state_.size(); ++s) {
    TxState& tx = tx_state_[s];
    if (!tx.up && tx.replace_at_ms < 0 && now - tx.opened_ms > kTxConnectMs) schedule_replace(tx);  // never connected
  }
  if (rx_item.revents & ZMQ_POLLIN) {
    while (next_event(rx_monitor_, &event, &endpoint)) {
      auto it = server_of_endpoint_.find(endpoint);
      if (it == server_of_endpoint_.end()) {
        PP_LOG(Warning) << "connection event " << event << " for " << endpoint << ", which is no server's address";
        continue;
      }
      RxState& rx = rx_state_[it->second];
      if (event == ZMQ_EVENT_DISCONNECTED && !rx.dropped) {
        rx.dropped = true;  // (servers leaving at the end of the job drop theirs too: no warning)
        // Answers are lost from now on: the record must keep the oldest unanswered until it has
        // been asked for again on a connection that is up (a recheck due is for the new one).
        rx.recheck_at_ms = rx.mark_at_ms = -1;
        {
          std::lock_guard<std::mutex> l(pending_mu_);
          pending_.Protect(it->second, true);
        }
        PP_LOG(Debug) << "connection for answers from server " << it->second << " dropped; reconnecting";
      } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && rx.dropped) {
        rx.dropped = false;
        rx.resend = true;
        rx.recheck_at_ms = rx.mark_at_ms = -1;
        std::lock_guard<std::mutex> l(mu_);
        rx.below = next_request_id_;  // what is sent from now on is answered on the new connection
      }
    }
  }
  if (stop_) return;
  for (size_t s = 0; s < rx_state_.size(); ++s) {
    RxState& rx = rx_state_[s];
    if (rx.mark_at_ms >= 0 && rx.mark_at_ms <= now) {
      std::lock_guard<std::mutex> l(mu_);
      rx.below = next_request_id_;
      rx.mark_at_ms = -1;
      // (A pass late past both: the requests just marked get their half of the while too.)
      rx.recheck_at_ms = std::max(rx.recheck_at_ms, now + kRecheckMs / 2);
    }
    const bool recheck = rx.recheck_at_ms >= 0 && rx.recheck_at_ms <= now;
    if (!rx.resend && !recheck) continue;
    std::unique_lock<std::mutex> send_lock(send_mu_, std::try_to_lock);
    if (!send_lock.owns_lock()) continue;  // a caller is sending: next pass (heartbeats go on)
    ResendTo(static_cast<int>(s), rx.resend ? "its connection for answers dropped and is back"
                                            : "answers still missing a while after its connection for answers came back",
             rx.below);
    if (!rx.resend) {
      // Every answer that may have been lost has been asked for again, ahead of what is sent from
      // now on: the server looks each up before anything newer could push it out of its record.
      std::lock_guard<std::mutex> l(pending_mu_);
      pending_.Protect(static_cast<int>(s), false);
    }
    rx.recheck_at_ms = rx.resend ? now + kRecheckMs : -1;
    rx.mark_at_ms = rx.resend ? now + kRecheckMs / 2 : -1;
    rx.resend = false;
  }
}

// Replaces the request sockets that are due (dropped, or never connected), each under send_mu_,
// and sends the requests unanswered on them again. The I/O thread does not wait for send_mu_ (a
// caller may hold it): it tries again on its next pass, and nothing goes out on the old socket
// meanwhile (ZeroMQ does not reconnect it).
void ClientImpl::ReplaceDueTx() {
  const int64_t now = NowMs();
  bool due = false;
  for (const TxState& tx : tx_state_) due |= tx.replace_at_ms >= 0 && tx.replace_at_ms <= now;
  // Not once the job is over for this worker (servers leave at its end): nothing to send.
  if (!due || stop_ || finished_ || control_.membership().job_state != Membership::kRunning) return;
  const Status sticky = Sticky();
  for (size_t s = 0; s < tx_state_.size(); ++s) {
    TxState& tx = tx_state_[s];
    if (tx.replace_at_ms < 0 || tx.replace_at_ms > now) continue;
    if (!sticky.ok()) {
      // Nor once a call failed for good: what the dropped connection had unanswered is not sent
      // again, and fails now, saying why, instead of waiting out its deadline (found in review).
      tx.replace_at_ms = -1;
      FailTarget(static_cast<int>(s), sticky);
      continue;
    }
    std::unique_lock<std::mutex> send_lock(send_mu_, std::try_to_lock);
    if (!send_lock.owns_lock()) continue;
    tx.replaced_ms = now;
    Status st = OpenTx(s);  // clears replace_at_ms
    if (!st.ok()) {
      PP_LOG(Error) << "a new connection to server " << s << " failed: " << st.ToString();
      tx.replace_at_ms = now + std::max(tx.backoff_ms, kTxBackoffMinMs);
      continue;
    }
    ResendTo(static_cast<int>(s), "its connection for requests dropped");
  }
}

// Sends the unanswered requests to server s below id `below` on tx_[s], oldest first: all of them
// (`unsent_only` false: again, after a drop) or those held back (true). Those whose caller gave up
// are dropped instead (failed: nobody waits for them). What ZeroMQ cannot take now stays held, in
// order, for the next try (FlushHeld). Caller holds send_mu_.
size_t ClientImpl::SendPending(int s, bool unsent_only, uint64_t below, size_t* unanswered) {
  struct Again {
    uint64_t id;
    std::array<zmq::message_t, 3> frames;
    std::shared_ptr<FutureState> fs;
  };
  std::vector<Again> again;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    for (auto& [id, p] : pending_) {
      if (p.target != s || id >= below || (unsent_only && !p.unsent)) continue;
      again.push_back({id, {}, p.fs});
      again.back().frames[0].copy(p.sent_header);
      again.back().frames[1].copy(p.sent_keys);
      again.back().frames[2].copy(p.sent_values);
    }
  }
  if (unanswered) *unanswered = again.size();
  std::vector<uint64_t> gave_up, went;
  size_t i = 0;
  uint64_t bytes = 0;
  for (; i < again.size(); ++i) {
    Again& a = again[i];
    bool abandoned;
    {
      std::lock_guard<std::mutex> l(a.fs->mu);
      abandoned = a.fs->abandoned;
    }
    if (abandoned) {
      gave_up.push_back(a.id);
      continue;
    }
    const uint64_t b = a.frames[1].size() + a.frames[2].size();
    bool would_block = false;
    Status st =
        SendDataFrames(tx_[s], std::move(a.frames[0]), std::move(a.frames[1]), std::move(a.frames[2]), &would_block);
    if (would_block) break;  // this one and the rest stay held, in order
    if (!st.ok()) PP_LOG(Warning) << "sending request " << a.id << " to server " << s << ": " << st.ToString();
    went.push_back(a.id);
    bytes += b;
  }
  std::vector<std::shared_ptr<FutureState>> failed;
  bool held = false;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    for (uint64_t id : went) {
      auto it = pending_.find(id);
      if (it != pending_.end()) it->second.unsent = false;
    }
    for (size_t k = i; k < again.size(); ++k) {
      auto it = pending_.find(again[k].id);
      if (it != pending_.end()) it->second.unsent = true;
    }
    for (uint64_t id : gave_up) {
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;
      failed.push_back(it->second.fs);
      pending_.erase(it);
    }
    // Held: whatever to s is still unsent, these or any past `below` (found in review: only these
    // were looked at, so a resend below an id could let later held requests be overtaken).
    for (const auto& [id, p] : pending_) held |= p.target == s && p.unsent;
  }
  held_[s] = held;
  if (held) any_held_ = true;
  for (auto& fs : failed) fs->Complete(s, Status::DeadlineExceeded("given up on by its caller before it was answered"));
  std::lock_guard<std::mutex> l(mu_);
  if (!unsent_only) stats_.resent += went.size();
  stats_.bytes_sent += unsent_only ? 0 : bytes;  // (held ones were counted when first asked)
  return went.size();
}

void ClientImpl::ResendTo(int s, const char* why, uint64_t below) {
  size_t unanswered = 0;
  const size_t sent = SendPending(s, /*unsent_only=*/false, below, &unanswered);
  if (unanswered > 0)
    PP_LOG(Warning) << "server " << s << ": " << why << "; sent " << sent << " of its " << unanswered
                    << " unanswered requests again" << (held_[s] ? " (the rest once its connection takes them)" : "");
  else
    PP_LOG(Debug) << "server " << s << ": " << why << "; nothing unanswered to send again";
}

// Requests held back because ZeroMQ could not take them (a queue full, a connection not there):
// sent in order once it can, before anything sent later. I/O thread.
void ClientImpl::FlushHeld() {
  if (!any_held_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> send_lock(send_mu_, std::try_to_lock);
  if (!send_lock.owns_lock()) return;
  bool still = false;
  for (size_t s = 0; s < held_.size(); ++s) {
    if (!held_[s]) continue;
    SendPending(static_cast<int>(s), /*unsent_only=*/true, UINT64_MAX, nullptr);
    still |= held_[s];
  }
  any_held_ = still;
}

void ClientImpl::ReceiveFor(const FutureState& fs, int64_t ms) {
  const Deadline deadline = Deadline::In(ms);
  // One blocking receive per reply: ZeroMQ sleeps on the socket's signal and reads the reply (a
  // poll followed by a receive costs twice the system calls). No spinning: on a busy machine a
  // spinning waiter takes the CPU from the threads that would answer it (measured:
  // docs/PERFORMANCE.md).
  while (fs.remaining_hint.load(std::memory_order_acquire) > 0) {
    if (!ReceiveOne(deadline.RemainingMs())) return;  // slice over
    if (deadline.Expired()) return;
  }
}

// Receives one reply from rx_, waiting up to `wait_ms` (0: not at all), and handles it. Returns
// false when none came. Caller holds receiver_->mu.
bool ClientImpl::ReceiveOne(int64_t wait_ms) {
  if (!RecvFrames(rx_, &frames_, kMaxDataFrames + 1, wait_ms)) return false;
  Message m;
  bool header_ok = false;
  Status st = Decode(&frames_, &m, &header_ok);
  const int from = header_ok && m.header.sender_role == Role::kServer ? m.header.sender_rank : -1;
  if (from < 0 || from >= num_servers()) {
    PP_LOG(Warning) << "reply dropped: " << (st.ok() ? "it names no server of this job" : st.ToString());
    return true;
  }
  if (!st.ok()) {
    PP_LOG(Warning) << "malformed reply from server " << from << ": " << st.ToString();
    // If it can be matched to a request, fail that request now rather than at its deadline.
    std::shared_ptr<FutureState> fs;
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      auto it = pending_.find(m.header.request_id);
      if (it != pending_.end() && it->second.target == from) {
        fs = it->second.fs;
        pending_.erase(it);
      }
    }
    if (fs) fs->Complete(from, st.Annotate("reply from server " + std::to_string(from)));
    return true;
  }
  HandleReply(m, from);
  return true;
}

// Receives and handles whatever replies rx_ holds (a bounded batch).
void ClientImpl::DrainRx() {
  for (int i = 0; i < 256 && ReceiveOne(0); ++i) {
  }
}

// I/O thread: scheduler requests, and server requests held back by send_latency_ms.
void ClientImpl::SendCommand(std::unique_ptr<Command> c) {
  if (c->part.target != kScheduler) {
    {
      std::lock_guard<std::mutex> send_lock(send_mu_);
      SendToServer(std::move(c));  // now in pending_
    }
    --held_back_;
    return;
  }
  const uint64_t id = c->header.request_id;
  std::shared_ptr<FutureState> fs = c->part.fs;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    pending_.emplace(id, std::move(c->part));
  }
  // As SendToServer: an error that came between the caller's check and the line above (the job's
  // end: FailAll) has not failed this request, and after the end the scheduler answers nothing
  // but its membership, which this worker already holds (found: a Barrier() posted as the job
  // aborted waited out its whole timeout); nor does it answer a node it no longer counts. A
  // Leave() goes despite another sticky error, not after those.
  const Membership& mem = control_.membership();
  Status st = control_.dropped();
  if (st.ok() && mem.job_state != Membership::kRunning)
    st = Status::Aborted(std::string(mem.job_state == Membership::kAborted ? "job aborted: " : "job finished: ") +
                         mem.reason);
  else if (st.ok() && !c->despite_sticky)
    st = Sticky();
  if (st.ok()) st = control_.Send(c->header);
  if (!st.ok()) {
    bool mine;  // (else already completed by whoever took it out)
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      mine = pending_.erase(id) > 0;
    }
    if (mine) fs->Complete(kScheduler, st);
    return;
  }
  const int64_t resend = NowMs() + ResendIntervalMs();
  if (control_requests_.empty() || resend < next_resend_ms_) next_resend_ms_ = resend;
  control_requests_[id] = SentRequest{c->header, resend};
}

void ClientImpl::ResendControlRequests() {
  const int64_t now = NowMs();
  if (now < next_resend_ms_) return;
  next_resend_ms_ = std::numeric_limits<int64_t>::max();
  for (auto it = control_requests_.begin(); it != control_requests_.end();) {
    std::shared_ptr<FutureState> fs;
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      auto p = pending_.find(it->first);
      if (p != pending_.end()) fs = p->second.fs;
    }
    bool wanted = fs != nullptr;  // no longer pending: answered, or failed
    if (wanted) {
      std::lock_guard<std::mutex> l(fs->mu);
      wanted = !fs->abandoned;  // its caller gave up waiting
    }
    if (!wanted) {
      it = control_requests_.erase(it);
      continue;
    }
    if (now >= it->second.resend_ms) {
      PP_LOG(Debug) << "asking the scheduler again: " << MsgTypeName(it->second.header.type) << " request "
                    << it->first << " (no answer yet)";
      control_.Send(it->second.header).IgnoreError();
      it->second.resend_ms = now + ResendIntervalMs();
    }
    next_resend_ms_ = std::min(next_resend_ms_, it->second.resend_ms);
    ++it;
  }
}

void ClientImpl::HandleReply(Message& m, int from) {
  Part part;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    auto it = pending_.find(m.header.request_id);
    if (it == pending_.end()) {
      PP_LOG(Debug) << "reply " << m.header.request_id << " matches no request";
      return;
    }
    if (it->second.target != from) {
      // Not the answer of the node it was sent to: leave the request to its own reply.
      PP_LOG(Warning) << (from == kScheduler ? std::string("the scheduler") : "server " + std::to_string(from))
                      << " answered request " << m.header.request_id << ", which went to "
                      << (it->second.target == kScheduler ? std::string("the scheduler")
                                                          : "server " + std::to_string(it->second.target))
                      << "; reply dropped";
      return;
    }
    part = std::move(it->second);
    pending_.erase(it);
  }
  const Header& h = m.header;
  if (h.type != part.reply_type) {
    part.fs->Complete(part.target, Status::Corruption(std::string("expected ") + MsgTypeName(part.reply_type) +
                                                      ", got " + MsgTypeName(h.type)));
    return;
  }
  if (h.status != Code::kOk) {
    Status st = h.status_obj().Annotate(from == kScheduler ? "scheduler" : "server " + std::to_string(from));
    if (h.type == MsgType::kClockReply) {
      std::lock_guard<std::mutex> l(mu_);
      if (sticky_.ok()) sticky_ = st;
    }
    part.fs->Complete(part.target, st);
    return;
  }
  if (h.type == MsgType::kPullReply) {
    if (h.row_count() != part.rows || h.dim != part.dim) {
      part.fs->Complete(part.target, Status::Corruption("pull reply has " + std::to_string(h.row_count()) +
                                                        " rows of dim " + std::to_string(h.dim) + ", expected " +
                                                        std::to_string(part.rows) + " of dim " + std::to_string(part.dim)));
      return;
    }
    const size_t nbytes = m.value_bytes();
    // A keyed reply of several stripes: which of the request's keys each reply row is.
    std::vector<uint32_t> key_of_row;
    if (h.flags & kFlagByStripe) {
      Status st = KeysOfStripeRows(m, part, &key_of_row);
      if (!st.ok()) {
        part.fs->Complete(part.target, st);
        return;
      }
    }
    {
      std::lock_guard<std::mutex> l(part.fs->mu);
      if (!part.fs->abandoned) {
        if (part.view) {
          // Kept, not copied.
          std::vector<zmq::message_t>& keep = part.view->frames[part.view_index];
          keep.clear();
          for (size_t fi = 0; fi < m.num_value_frames(); ++fi) keep.push_back(std::move(m.value_frame(fi)));
          if (part.view->keyed) part.view->key_of_row[part.view_index] = std::move(key_of_row);
          part.view->landed.fetch_add(1, std::memory_order_acq_rel);
        } else {
          // Row i of the reply (counted over its frames, each whole rows) is key k = i, or
          // key_of_row[i], of the request: it goes to out + positions[k] * dim, or out + k * dim.
          const size_t row_floats = part.dim;
          size_t i = 0;
          for (size_t fi = 0; fi < m.num_value_frames(); ++fi) {
            const zmq::message_t& f = m.value_frame(fi);
            const float* src = static_cast<const float*>(f.data());
            const size_t rows = row_floats ? f.size() / sizeof(float) / row_floats : 0;
            if (part.positions.empty() && key_of_row.empty()) {
              std::memcpy(part.out + i * row_floats, src, f.size());
            } else {
              for (size_t j = 0; j < rows; ++j) {
                const size_t k = key_of_row.empty() ? i + j : key_of_row[i + j];
                const size_t to = part.positions.empty() ? k : part.positions[k];
                std::memcpy(part.out + to * row_floats, src + j * row_floats, row_floats * sizeof(float));
              }
            }
            i += rows;
          }
        }
      }
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      stats_.bytes_received += nbytes;
      if (h.staleness > stats_.max_staleness) stats_.max_staleness = h.staleness;
    }
    part.fs->Complete(part.target, Status::OK(), h.staleness);
    return;
  }
  if (from == kScheduler) {
    std::lock_guard<std::mutex> l(part.fs->mu);
    part.fs->reply = h;
  }
  part.fs->Complete(part.target, Status::OK());
}

void ClientImpl::OnMembership() {
  const Membership& mem = control_.membership();
  for (size_t s = 0; s < mem.server_alive.size(); ++s)
    if (!mem.server_alive[s])
      FailTarget(static_cast<int>(s), Status::Unavailable("server " + std::to_string(s) + " (" +
                                                          control_.cluster().servers[s].address +
                                                          ") was declared dead by the scheduler"));
  if (mem.job_state == Membership::kAborted) FailAll(Status::Aborted("job aborted: " + mem.reason));
  // The scheduler waits to hear that a job's end arrived (a heartbeat says which membership a
  // node holds): say so at once.
  if (mem.job_state != Membership::kRunning) control_.Tick(/*at_once=*/true).IgnoreError();
  // Finished with this worker done: its finish arrived, whether or not the answer (lost with a
  // dropped connection) ever comes.
  const int me = control_.rank();
  if (mem.job_state == Membership::kFinished && me >= 0 && static_cast<size_t>(me) < mem.worker_done.size() &&
      mem.worker_done[me]) {
    std::vector<std::shared_ptr<FutureState>> done;
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.target != kScheduler || it->second.reply_type != MsgType::kDoneReply) {
          ++it;
          continue;
        }
        done.push_back(it->second.fs);
        it = pending_.erase(it);
      }
    }
    for (auto& fs : done) fs->Complete(kScheduler, Status::OK());
  }
}

void ClientImpl::FailTarget(int target, const Status& st) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (sticky_.ok()) sticky_ = st;
  }
  std::vector<Part> failed;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
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

void ClientImpl::FailAll(const Status& st) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (sticky_.ok()) sticky_ = st;
  }
  PendingRequests::Map failed;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    failed = pending_.TakeAll();
  }
  for (auto& [id, part] : failed) part.fs->Complete(part.target, st);
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  PP_RETURN_IF_ERROR(ControlOptionsOf(options).Validate());
  if (options.request_timeout_ms < 1)
    return Status::InvalidArgument("request_timeout_ms must be at least 1, not " + std::to_string(options.request_timeout_ms));
  if (options.max_unanswered_mb < 0)
    return Status::InvalidArgument("max_unanswered_mb must be 0 (no limit) or more, not " +
                                   std::to_string(options.max_unanswered_mb));
  auto c = std::make_unique<ClientImpl>(options);
  PP_RETURN_IF_ERROR(c->Start());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace pushpull
