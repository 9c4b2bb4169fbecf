// Sending a call: its FutureState (NewState), and its requests (Post). Post refuses a call with
// a part over its server's frame limit, unsent; waits in the call while earlier requests hold too
// much unanswered (backpressure: max_unanswered_mb, kMaxUnansweredRequests per server); stamps
// request ids and this worker's clock in one order; then sends each request to a server from the
// calling thread (ServerLinks::Send), and hands the scheduler's to the I/O thread.
//
// Threading: calling threads. Post holds ServerLinks' send_mu from its last look at the room to
// its last send, never while it waits for room (other calls that fit go on meanwhile); under it
// the leaves (RequestTable's lock, ClientState::mu, FutureState::mu), one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/time.h"
#include "pushpull/client.h"
#include "worker/client_state.h"
#include "worker/futures.h"
#include "worker/requests.h"
#include "worker/server_links.h"

namespace pushpull {
namespace internal {

class CallSender {
 public:
  CallSender(const ClientOptions& options, const ControlChannel& control, ClientState& state, RequestTable& requests,
             ServerLinks& links, CommandQueue& queue);

  // A call of `parts` requests: to the scheduler (`to_servers` false) or to servers, whose
  // waiters may receive the replies themselves.
  std::shared_ptr<FutureState> NewState(std::string what, int parts, bool to_servers) const;
  // A call to servers about a table, described only when an error needs it.
  std::shared_ptr<FutureState> NewState(const char* kind, const std::string& table, int64_t rows, int parts) const;
  // Futures of calls that fail before anything is sent.
  Future Failed(const Status& st) const;
  Future FailedPull(const Status& st, PulledRows* view) const;  // and marks the view failed
  Future RefusedPush(const Status& st) const;                   // and fails the next Clock() (NoteRefusedPush)

  // Sends one call's requests (each with its part's FutureState set), in order, assigning their
  // request ids. Whatever fails (a frame too large, no room in time, a send) completes the
  // call's parts with the error.
  void Post(std::vector<std::unique_ptr<Command>> cmds) EXCLUDES(links_.send_mu());

 private:
  // Until the commands fit (RequestTable::CheckRoom) or `deadline` (request_timeout_ms after the
  // call), receiving replies meanwhile; DeadlineExceeded names what it waited for, a sticky error
  // that came meanwhile is returned as it is.
  Status WaitForRoom(const std::vector<std::unique_ptr<Command>>& cmds, const Deadline& deadline)
      EXCLUDES(links_.send_mu());
  int num_servers() const { return static_cast<int>(control_.cluster().servers.size()); }

  const ClientOptions& options_;
  const ControlChannel& control_;  // cluster() and rank(): fixed once registered
  ClientState& state_;
  RequestTable& requests_;
  ServerLinks& links_;
  CommandQueue& queue_;
};

}  // namespace internal
}  // namespace pushpull
