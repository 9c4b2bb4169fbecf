// The client's I/O thread and reply handling. Replies are matched to their requests by id
// (RequestTable) and complete the calls' FutureStates: a pull's rows are copied into the caller's
// buffer, or its frames kept for a PulledRows. Whoever holds the reply socket's lock receives: a
// thread waiting on a Future (ReceiveFor, through WaitState: no hand-off between threads on the
// reply path), or else the I/O thread, which drains replies nobody waits for. The I/O thread also
// owns the scheduler's connection (heartbeats, membership, control replies: ControlCalls), sends
// the scheduler's requests calling threads hand it (CommandQueue), and watches the server
// connections (ServerLinks).
//
// Threading: IoLoop runs on the I/O thread (Start to Stop); ReceiveFor on a waiting caller with
// the reply socket's lock held; ReceiveOne and DrainRx with it held; HandleReply on whichever
// thread received the reply, with the leaves taken one at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/control.h"
#include "common/wire.h"
#include "pushpull/client.h"
#include "pushpull/status.h"
#include "worker/client_state.h"
#include "worker/control_calls.h"
#include "worker/futures.h"
#include "worker/requests.h"
#include "worker/server_links.h"

namespace pushpull {
namespace internal {

class ReplyLoop final : public Receiver {
 public:
  ReplyLoop(Transport& transport, ControlChannel& control, ClientState& state, RequestTable& requests,
            ServerLinks& links, ControlCalls& control_calls, CommandQueue& queue);

  void Start();  // the I/O thread
  void Stop();   // and waits for it to end
  // After Stop: fails the scheduler's requests the I/O thread did not get to send, rather than
  // let them wait out their deadlines.
  void FailUnsent(const Status& st);

  // A waiting caller receives (Receiver).
  void ReceiveFor(const FutureState& fs, int64_t ms) override;

 private:
  void IoLoop();
  // Receives one reply from the reply socket, waiting up to `wait_ms` (0: not at all), and
  // handles it. False when none came.
  bool ReceiveOne(int64_t wait_ms) REQUIRES(links_.rx_mu());
  // Receives and handles whatever replies the socket holds (a bounded batch).
  void DrainRx() REQUIRES(links_.rx_mu());
  // A reply from server `from`, or kScheduler.
  void HandleReply(Message& m, int from);

  Transport& transport_;
  ControlChannel& control_;  // I/O thread
  ClientState& state_;
  RequestTable& requests_;
  ServerLinks& links_;
  ControlCalls& control_calls_;
  CommandQueue& queue_;

  std::thread io_;
  std::atomic<bool> stop_{false};
};

}  // namespace internal
}  // namespace pushpull
