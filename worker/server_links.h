// The worker's connections to the servers. A request socket per server (tx: a DEALER each) on
// which calling threads send; one reply socket (rx: a DEALER connected to every server, whose
// routing id every request names in reply_to) on which all replies come back; watches that
// report each connection dropping and coming back; the Hello handshake through which each server
// learns the reply socket. A dropped connection is no failure: a request socket is replaced (with
// backoff) and the requests unanswered on it are sent again on the new one, oldest first, ahead of
// anything newer; once the reply socket has reconnected to a server, the requests unanswered are
// sent again, and once more a while later (answers the server sent on the old connection are lost).
// The server answers a repeat once and never runs it twice (server/request_record.h).
// Every call on the sockets to the servers is made here.
//
// Threading:
//  - send_mu_ guards the request sockets and what is held back on them. A calling thread holds it
//    from stamping request ids to sending (CallSender::Post, Send); the I/O thread only tries it
//    (FlushHeld, OnConnectionEvents, ReplaceDueTx) and never waits for it.
//  - The reply socket is guarded by receiver()->mu (rx_mu()): whoever holds it receives (a waiting
//    caller, or the I/O thread).
//  - The connection watches and states belong to the I/O thread (and to Open, before it starts).
//  - The servers' addresses, frame limits and the reply socket's routing id are set in Open and
//    read-only afterwards.
//  - Lock order: send_mu_ and rx_mu() are never held together; each may be held while the
//    leaves are taken (RequestTable's lock, ClientState::mu, FutureState::mu).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/mutex.h"
#include "common/wire.h"
#include "pushpull/client.h"
#include "pushpull/status.h"
#include "worker/client_state.h"
#include "worker/futures.h"
#include "worker/requests.h"

namespace pushpull {
namespace internal {

class ServerLinks {
 public:
  ServerLinks(Transport& transport, const ClientOptions& options, ControlChannel& control, ClientState& state,
              RequestTable& requests);

  // Connects to every server of the job (registered with the scheduler) and says hello to each,
  // within register_timeout_ms. Returns the lowest clock the servers hold for this rank (ahead of
  // the job's start: this worker takes a dead one's place). Before the I/O thread starts.
  Result<int64_t> Open();

  // The reply socket's lock, shared with the Futures whose waiters receive.
  const std::shared_ptr<ReceiverHandle>& receiver() const { return receiver_; }
  Mutex& rx_mu() const RETURN_CAPABILITY(receiver_->mu) { return receiver_->mu; }
  // Who receives for a waiter (null: nobody, the client is closing).
  void SetReceiver(Receiver* r) EXCLUDES(receiver_->mu);

  Mutex& send_mu() RETURN_CAPABILITY(send_mu_) { return send_mu_; }
  int num_servers() const { return static_cast<int>(addresses_.size()); }
  // The largest frame server s takes (0: no limit). Its ZeroMQ drops the connection for a larger
  // one, so such a request is refused before it is sent.
  uint64_t max_frame(int s) const { return max_frame_[s]; }

  // Registers the request (RequestTable), then sends it on its server's request socket, or holds
  // it back, in order, while ZeroMQ cannot take it (the I/O thread sends it later: FlushHeld). A
  // sticky error, or a send that fails, fails it. Never blocks.
  void Send(std::unique_ptr<Command> c) REQUIRES(send_mu_);

  // Receives one reply's frames, waiting up to `wait_ms` (0: not at all); false when none came.
  // DecodeReceived then moves them into *m (*header_ok: whether the header itself decoded).
  bool ReceiveFrames(int64_t wait_ms) REQUIRES(receiver_->mu);
  Status DecodeReceived(Message* m, bool* header_ok) REQUIRES(receiver_->mu);

  // I/O thread. The connection watches to poll: appended to `items`, the reply socket's first.
  void AddWatches(std::vector<PollItem>* items);
  // Reacts to what the watches reported (`items`: AddWatches' entries after a poll) and to what
  // is due: a request socket to replace, requests to send again. `stop`: the client closing.
  void OnConnectionEvents(const PollItem* items, const std::atomic<bool>& stop) EXCLUDES(send_mu_);
  // Replaces the request sockets that are due (dropped, or never connected), sending again what
  // was unanswered on them; after a sticky error fails it instead.
  void ReplaceDueTx(bool stopping) EXCLUDES(send_mu_);
  // Sends the requests held back, in order, as far as ZeroMQ takes them.
  void FlushHeld() EXCLUDES(send_mu_);

 private:
  Status OpenTx(size_t s) REQUIRES(send_mu_);
  Status KeepInTouch();
  Result<int64_t> Hello();
  void ResendTo(int s, const char* why, uint64_t below = UINT64_MAX) REQUIRES(send_mu_);
  size_t SendPending(int s, bool unsent_only, uint64_t below, size_t* unanswered) REQUIRES(send_mu_);

  // A request socket is replaced when its connection dropped, after kTxBackoffMinMs doubling to
  // kTxBackoffMaxMs while drops come within kTxStableMs of each other; and when it has not
  // connected within kTxConnectMs.
  static constexpr int64_t kTxConnectMs = 2000;
  static constexpr int64_t kTxBackoffMinMs = 100, kTxBackoffMaxMs = 5000, kTxStableMs = 10000;
  // After the reply socket is back, the requests still unanswered are sent again once more this
  // much later: answers the server sent before it had attached the new connection were lost too.
  // A quarter second: far more than a server takes to attach a new connection (its socket does at
  // its next operation). Until then no more requests go to that server than its record keeps past
  // the oldest unanswered (RequestTable::Protect), so a lost answer is still there when asked.
  static constexpr int64_t kRecheckMs = 250;

  Transport& transport_;
  const ClientOptions& options_;
  ControlChannel& control_;  // Open (before the I/O thread), then the I/O thread
  ClientState& state_;
  RequestTable& requests_;

  const std::shared_ptr<ReceiverHandle> receiver_ = std::make_shared<ReceiverHandle>();
  std::unique_ptr<Socket> rx_ GUARDED_BY(receiver_->mu);  // replies from all servers
  std::vector<Frame> frames_ GUARDED_BY(receiver_->mu);   // a reply's frames, as received
  std::string rx_id_;                                     // rx_'s routing id, named in every request's reply_to

  // Request sockets are reconnected here, not by ZeroMQ (OpenTx), so that what a drop may have lost
  // goes first on the new connection.
  // Lock order: after ControlCalls::finish_mu_; never held with rx_mu(); before the leaves.
  Mutex send_mu_;
  std::vector<std::unique_ptr<Socket>> tx_ GUARDED_BY(send_mu_);  // requests to each server
  std::vector<char> held_ GUARDED_BY(send_mu_);                   // per server: requests held back (FlushHeld)
  std::atomic<bool> any_held_{false};

  // I/O thread: tx_'s and rx_'s connection watches; which server an rx_ event's endpoint is.
  std::vector<std::unique_ptr<ConnectionWatch>> tx_watches_;
  std::unique_ptr<ConnectionWatch> rx_watch_;
  std::vector<std::string> addresses_;  // the servers' addresses, numeric (Open)
  std::map<std::string, int> server_of_endpoint_;
  std::vector<uint64_t> max_frame_;  // Open: each server's HelloReply
  struct TxState {
    bool up = false;  // connected (handshake done)
    int64_t opened_ms = 0;
    int64_t replace_at_ms = -1;  // a new socket is due then (-1: none)
    int64_t backoff_ms = 0;
    int64_t replaced_ms = -kTxStableMs;  // when it was last replaced
  };
  std::vector<TxState> tx_state_;  // I/O thread (and Open)
  struct RxState {
    bool dropped = false;
    bool resend = false;         // back after a drop: requests below `below` to be sent again ...
    int64_t recheck_at_ms = -1;  // ... and those still unanswered then once more, up to the ones
    int64_t mark_at_ms = -1;     // sent until half way there (`below` is moved on then)
    uint64_t below = 0;
  };
  std::vector<RxState> rx_state_;  // I/O thread
};

}  // namespace internal
}  // namespace pushpull
