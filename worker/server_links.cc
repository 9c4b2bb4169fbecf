// The worker's connections to the servers: sockets, the Hello handshake, sending, and what a
// dropped connection costs. Threading: see worker/server_links.h.

#include "worker/server_links.h"

#include <algorithm>
#include <cstring>

#include "common/address.h"
#include "common/log.h"
#include "common/time.h"

namespace pushpull {
namespace internal {

ServerLinks::ServerLinks(Transport& transport, const ClientOptions& options, ControlChannel& control,
                         ClientState& state, RequestTable& requests)
    : transport_(transport), options_(options), control_(control), state_(state), requests_(requests) {}

Result<int64_t> ServerLinks::Open() {
  const ClusterMap& cm = control_.cluster();
  const size_t n = cm.servers.size();
  // Per server a tx_ socket carries requests from the calling threads (under send_mu_); one rx_
  // socket, connected to every server, receives the replies, which requests address to it by
  // routing id. Callers so send without a hop through the I/O thread, and a waiting caller
  // receives from all servers with one blocking receive. (No other thread runs yet: the locks are
  // taken so that every use of the sockets is under its own.)
  rx_id_ = RandomRoutingId("rx-" + std::to_string(control_.rank()));
  {
    MutexLock l(&receiver_->mu);
    SocketOptions o;
    o.routing_id = rx_id_;
    PP_ASSIGN_OR_RETURN(rx_, transport_.MakeSocket(SocketKind::kDealer, o));
    // A dropped connection (OnConnectionEvents): rx_ reconnects by itself, under its routing id.
    PP_ASSIGN_OR_RETURN(rx_watch_, rx_->WatchConnections());
  }
  tx_watches_.resize(n);
  rx_state_.resize(n);
  tx_state_.resize(n);
  max_frame_.assign(n, 0);
  {
    MutexLock l(&send_mu_);
    tx_.resize(n);
    held_.assign(n, 0);
  }
  for (size_t s = 0; s < n; ++s) {
    // Connected to by numeric address, so that its events name it the same way every time.
    addresses_.push_back(NumericTcpAddress(cm.servers[s].address));
    server_of_endpoint_[addresses_[s]] = static_cast<int>(s);
    {
      MutexLock l(&send_mu_);
      PP_RETURN_IF_ERROR(OpenTx(s));
    }
    MutexLock l(&receiver_->mu);
    if (Status st = rx_->Connect(addresses_[s]); !st.ok())
      return Status::Unavailable("connect to server " + std::to_string(s) + " at " + cm.servers[s].address + ": " +
                                 st.message());
  }
  return Hello();
}

void ServerLinks::SetReceiver(Receiver* r) {
  MutexLock l(&receiver_->mu);  // waits for a receiving caller's slice
  receiver_->client = r;
}

// tx_[s], new: a DEALER to server s, its connection watched. ZeroMQ never reconnects it: a
// dropped one is replaced by a new socket (OnConnectionEvents), which sends the requests the
// drop may have lost ahead of any later one. ZeroMQ's own reconnect would send what callers
// queued after the drop first, out of order (a push tagged with a clock the server has not
// heard of yet is refused). Open(), or the I/O thread.
Status ServerLinks::OpenTx(size_t s) {
  const std::string& address = addresses_[s];
  tx_state_[s].up = false;
  tx_state_[s].opened_ms = NowMs();
  tx_state_[s].replace_at_ms = -1;
  auto fail = [&](const Status& st) {
    return Status::Unavailable("connect to server " + std::to_string(s) + " at " + address + ": " + st.message());
  };
  SocketOptions o;
  // (Sends never block: SendDataFrames. A request the transport cannot take now is held back.)
  o.reconnect = false;
  auto sock = transport_.MakeSocket(SocketKind::kDealer, o);
  if (!sock.ok()) return fail(sock.status());
  auto watch = (*sock)->WatchConnections();
  if (!watch.ok()) return fail(watch.status());
  if (Status st = (*sock)->Connect(address); !st.ok()) return fail(st);
  tx_[s] = std::move(*sock);
  tx_watches_[s] = std::move(*watch);
  return Status::OK();
}

// While Open waits for the servers (one restoring a large checkpoint answers a hello only once
// it has read it): the scheduler's news read and heartbeats sent, so that this worker does not
// look dead meanwhile, and a job aborted meanwhile ends the wait with its reason.
Status ServerLinks::KeepInTouch() {
  for (int i = 0; i < 64; ++i) {
    PollItem it(&control_.socket());
    transport_.Poll(&it, 1, 0);
    if (!it.ready) break;
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
Result<int64_t> ServerLinks::Hello() {
  std::vector<int64_t> server_clock(addresses_.size(), 0);
  Deadline deadline = Deadline::In(options_.register_timeout_ms);
  for (size_t s = 0; s < addresses_.size(); ++s) {
    bool answered = false;
    int64_t reopen = NowMs() + kTxConnectMs;
    while (!answered && !deadline.Expired()) {
      PP_RETURN_IF_ERROR(KeepInTouch());
      {
        MutexLock l(&send_mu_);
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
        PP_RETURN_IF_ERROR(SendDataFrames(*tx_[s], EncodeHeaderFrame(h), Frame(), Frame(), &would_block));
      }
      MutexLock l(&receiver_->mu);
      PollItem item(rx_.get());
      transport_.Poll(&item, 1, 100);
      while (item.ready && RecvFrames(*rx_, &frames_, kMaxDataFrames + 1)) {
        Message m;
        if (Decode(&frames_, &m).ok() && m.header.type == MsgType::kHelloReply &&
            m.header.sender_role == Role::kServer && m.header.sender_rank == static_cast<int>(s)) {
          answered = true;  // (a late answer to an earlier server's hello is dropped)
          max_frame_[s] = m.header.num_rows;
          server_clock[s] = m.header.clock;
        }
        transport_.Poll(&item, 1, 0);
      }
    }
    if (!answered)
      return Status::DeadlineExceeded("server " + std::to_string(s) + " at " + control_.cluster().servers[s].address +
                                      " did not answer a hello within " + std::to_string(options_.register_timeout_ms) +
                                      " ms");
  }
  // Each server says where this rank's clock is: the lowest of them, for the caller to compare
  // with the job's start.
  return server_clock.empty() ? int64_t(0) : *std::min_element(server_clock.begin(), server_clock.end());
}

void ServerLinks::Send(std::unique_ptr<Command> c) {
  const int s = c->part.target;
  const uint64_t id = c->header.request_id;
  c->header.reply_to = rx_id_;
  std::shared_ptr<FutureState> fs = c->part.fs;
  Frame header = EncodeHeaderFrame(c->header);
  c->part.sent_header.copy(header);
  c->part.sent_keys.copy(c->keys);
  c->part.sent_values.copy(c->values);
  c->part.bytes = c->keys.size() + c->values.size();
  requests_.Add(id, std::move(c->part));
  // A failure (a dead server, an aborted job) sets the sticky error before it fails what is
  // pending: one that came in between the caller's check and the line above has not seen this
  // request, so it is failed here. Whoever takes it out of the table completes it, once.
  Status st = state_.Sticky();
  // Held back, in order, while ZeroMQ cannot take requests to s (a connection not there: request
  // sockets are not reconnected by ZeroMQ; or the server takes nothing and the queue is full): the
  // I/O thread sends them once it can (FlushHeld), or a new connection does (OnConnectionEvents).
  // Callers never block on a send (only on room, in CallSender::Post: max_unanswered_mb).
  bool would_block = held_[s];
  if (st.ok() && !would_block)
    st = SendDataFrames(*tx_[s], std::move(header), std::move(c->keys), std::move(c->values), &would_block);
  if (st.ok() && would_block) {
    held_[s] = 1;
    any_held_ = true;
    requests_.MarkUnsent(id);
  }
  if (!st.ok() && requests_.Remove(id)) {  // (else already completed by whoever took it out)
    st = st.Annotate("sending to server " + std::to_string(s));
    if (c->header.type == MsgType::kPush) state_.NoteRefusedPush(st);
    fs->Complete(s, st);
  }
}

bool ServerLinks::ReceiveFrames(int64_t wait_ms) { return RecvFrames(*rx_, &frames_, kMaxDataFrames + 1, wait_ms); }

Status ServerLinks::DecodeReceived(Message* m, bool* header_ok) { return Decode(&frames_, m, header_ok); }

void ServerLinks::AddWatches(std::vector<PollItem>* items) {
  items->push_back(PollItem(rx_watch_.get()));
  for (auto& w : tx_watches_) items->push_back(PollItem(w.get()));
}

// A connection to a server that dropped may have lost requests on their way and answers on theirs.
// Requests: tx_[s] is replaced (ReplaceDueTx) and every unanswered request to s is sent on the
// new socket again, oldest first, before anything sent later (callers wait on send_mu_). Answers:
// once rx_ is connected to s again, the requests to s still unanswered are sent again, and
// kRecheckMs later those still unanswered once more, the ones sent in the first half of that
// while included: the server may answer on the old connection until its socket has taken the
// new one.
void ServerLinks::OnConnectionEvents(const PollItem* items, const std::atomic<bool>& stop) {
  const PollItem& rx_item = items[0];
  const PollItem* tx_items = items + 1;
  ConnectionEvent event;
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
  for (size_t s = 0; s < tx_watches_.size(); ++s) {
    if (!tx_items[s].ready) continue;
    TxState& tx = tx_state_[s];
    while (tx_watches_[s]->Next(&event)) {
      if (event.kind == ConnectionEvent::kConnected)
        tx.up = true;
      else if (event.kind == ConnectionEvent::kDisconnected && tx.replace_at_ms < 0)
        schedule_replace(tx);
    }
  }
  for (size_t s = 0; s < tx_state_.size(); ++s) {
    TxState& tx = tx_state_[s];
    if (!tx.up && tx.replace_at_ms < 0 && now - tx.opened_ms > kTxConnectMs) schedule_replace(tx);  // never connected
  }
  if (rx_item.ready) {
    while (rx_watch_->Next(&event)) {
      auto it = server_of_endpoint_.find(event.endpoint);
      if (it == server_of_endpoint_.end()) {
        PP_LOG(Warning) << "connection event " << int(event.kind) << " for " << event.endpoint
                        << ", which is no server's address";
        continue;
      }
      RxState& rx = rx_state_[it->second];
      if (event.kind == ConnectionEvent::kDisconnected && !rx.dropped) {
        rx.dropped = true;  // (servers leaving at the end of the job drop theirs too: no warning)
        // Answers are lost from now on: the record must keep the oldest unanswered until it has
        // been asked for again on a connection that is up (a recheck due is for the new one).
        rx.recheck_at_ms = rx.mark_at_ms = -1;
        requests_.Protect(it->second, true);
        PP_LOG(Debug) << "connection for answers from server " << it->second << " dropped; reconnecting";
      } else if (event.kind == ConnectionEvent::kConnected && rx.dropped) {
        rx.dropped = false;
        rx.resend = true;
        rx.recheck_at_ms = rx.mark_at_ms = -1;
        MutexLock l(&state_.mu);
        rx.below = state_.next_request_id;  // what is sent from now on is answered on the new connection
      }
    }
  }
  if (stop) return;
  for (size_t s = 0; s < rx_state_.size(); ++s) {
    RxState& rx = rx_state_[s];
    if (rx.mark_at_ms >= 0 && rx.mark_at_ms <= now) {
      MutexLock l(&state_.mu);
      rx.below = state_.next_request_id;
      rx.mark_at_ms = -1;
      // (A pass late past both: the requests just marked get their half of the while too.)
      rx.recheck_at_ms = std::max(rx.recheck_at_ms, now + kRecheckMs / 2);
    }
    const bool recheck = rx.recheck_at_ms >= 0 && rx.recheck_at_ms <= now;
    if (!rx.resend && !recheck) continue;
    if (!send_mu_.TryLock()) continue;  // a caller is sending: next pass (heartbeats go on)
    ResendTo(static_cast<int>(s),
             rx.resend ? "its connection for answers dropped and is back"
                       : "answers still missing a while after its connection for answers came back",
             rx.below);
    if (!rx.resend) {
      // Every answer that may have been lost has been asked for again, ahead of what is sent from
      // now on: the server looks each up before anything newer could push it out of its record.
      requests_.Protect(static_cast<int>(s), false);
    }
    rx.recheck_at_ms = rx.resend ? now + kRecheckMs : -1;
    rx.mark_at_ms = rx.resend ? now + kRecheckMs / 2 : -1;
    rx.resend = false;
    send_mu_.Unlock();
  }
}

// Each socket is replaced under send_mu_, which the I/O thread does not wait for (a caller may
// hold it): it tries again on its next pass, and nothing goes out on the old socket meanwhile
// (ZeroMQ does not reconnect it).
void ServerLinks::ReplaceDueTx(bool stopping) {
  const int64_t now = NowMs();
  bool due = false;
  for (const TxState& tx : tx_state_) due |= tx.replace_at_ms >= 0 && tx.replace_at_ms <= now;
  // Not once the job is over for this worker (servers leave at its end): nothing to send.
  if (!due || stopping || state_.finished || control_.membership().job_state != Membership::kRunning) return;
  const Status sticky = state_.Sticky();
  for (size_t s = 0; s < tx_state_.size(); ++s) {
    TxState& tx = tx_state_[s];
    if (tx.replace_at_ms < 0 || tx.replace_at_ms > now) continue;
    if (!sticky.ok()) {
      // Nor once a call failed for good: what the dropped connection had unanswered is not sent
      // again, and fails now, saying why, instead of waiting out its deadline.
      tx.replace_at_ms = -1;
      FailTarget(state_, requests_, static_cast<int>(s), sticky);
      continue;
    }
    if (!send_mu_.TryLock()) continue;
    tx.replaced_ms = now;
    Status st = OpenTx(s);  // clears replace_at_ms
    if (!st.ok()) {
      PP_LOG(Error) << "a new connection to server " << s << " failed: " << st.ToString();
      tx.replace_at_ms = now + std::max(tx.backoff_ms, kTxBackoffMinMs);
    } else {
      ResendTo(static_cast<int>(s), "its connection for requests dropped");
    }
    send_mu_.Unlock();
  }
}

// Sends the unanswered requests to server s below id `below` on tx_[s], oldest first: all of them
// (`unsent_only` false: again, after a drop) or those held back (true). Those whose caller gave up
// are dropped instead (failed: nobody waits for them). What ZeroMQ cannot take now stays held, in
// order, for the next try (FlushHeld).
size_t ServerLinks::SendPending(int s, bool unsent_only, uint64_t below, size_t* unanswered) {
  std::vector<RequestTable::Resend> again = requests_.CopyToResend(s, unsent_only, below);
  if (unanswered) *unanswered = again.size();
  size_t went = 0;
  uint64_t bytes = 0;
  for (RequestTable::Resend& a : again) {
    bool abandoned;
    {
      MutexLock l(&a.fs->mu);
      abandoned = a.fs->abandoned;
    }
    if (abandoned) {
      a.outcome = RequestTable::Resend::kGaveUp;
      continue;
    }
    const uint64_t b = a.frames[1].size() + a.frames[2].size();
    bool would_block = false;
    Status st =
        SendDataFrames(*tx_[s], std::move(a.frames[0]), std::move(a.frames[1]), std::move(a.frames[2]), &would_block);
    if (would_block) break;  // this one and the rest stay held, in order
    if (!st.ok()) PP_LOG(Warning) << "sending request " << a.id << " to server " << s << ": " << st.ToString();
    a.outcome = RequestTable::Resend::kWent;
    ++went;
    bytes += b;
  }
  std::vector<std::shared_ptr<FutureState>> failed;
  const bool held = requests_.AfterResend(s, again, &failed);
  held_[s] = held;
  if (held) any_held_ = true;
  for (auto& fs : failed) fs->Complete(s, Status::DeadlineExceeded("given up on by its caller before it was answered"));
  MutexLock l(&state_.mu);
  if (!unsent_only) state_.stats.resent += went;
  state_.stats.bytes_sent += unsent_only ? 0 : bytes;  // (held ones were counted when first asked)
  return went;
}

void ServerLinks::ResendTo(int s, const char* why, uint64_t below) {
  size_t unanswered = 0;
  const size_t sent = SendPending(s, /*unsent_only=*/false, below, &unanswered);
  if (unanswered > 0)
    PP_LOG(Warning) << "server " << s << ": " << why << "; sent " << sent << " of its " << unanswered
                    << " unanswered requests again" << (held_[s] ? " (the rest once its connection takes them)" : "");
  else
    PP_LOG(Debug) << "server " << s << ": " << why << "; nothing unanswered to send again";
}

// Requests held back because ZeroMQ could not take them (a queue full, a connection not there):
// sent in order once it can, before anything sent later.
void ServerLinks::FlushHeld() {
  if (!any_held_.load(std::memory_order_relaxed)) return;
  if (!send_mu_.TryLock()) return;
  bool still = false;
  for (size_t s = 0; s < held_.size(); ++s) {
    if (!held_[s]) continue;
    SendPending(static_cast<int>(s), /*unsent_only=*/true, UINT64_MAX, nullptr);
    still |= held_[s];
  }
  any_held_ = still;
  send_mu_.Unlock();
}

}  // namespace internal
}  // namespace pushpull
