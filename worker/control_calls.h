// Control calls: the calls that carry no table data (CreateTable, Clock with its settling wait,
// Barrier, Checkpoint, Finish, Leave), and the scheduler's side of the I/O thread: requests to
// the scheduler sent, and asked again until answered (a request or its answer may be lost with a
// dropped scheduler connection; the scheduler answers a repeat from its record, never runs it
// twice), and the membership news that fails calls (a server declared dead, the job aborted) or
// answers them (this worker's finish arrived).
//
// Threading: the calls run on calling threads. Finish() holds finish_mu_ throughout, the first
// lock of the client's order (before the reply socket's lock, ServerLinks' send_mu and the
// leaves). SendToScheduler, ResendRequests and OnMembership run on the I/O thread only, which
// alone uses the control channel's socket and the list of requests sent to the scheduler.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/control.h"
#include "common/mutex.h"
#include "common/time.h"
#include "pushpull/client.h"
#include "pushpull/status.h"
#include "worker/call_sender.h"
#include "worker/client_state.h"
#include "worker/requests.h"

namespace pushpull {
namespace internal {

class ControlCalls {
 public:
  ControlCalls(const ClientOptions& options, ControlChannel& control, ClientState& state, RequestTable& requests,
               CallSender& sender);

  // Calling threads: as Client's.
  Result<Table> CreateTable(const TableSpec& spec);
  Status Clock();
  Status Barrier();
  Status Checkpoint(const std::string& run);
  Status Finish() EXCLUDES(finish_mu_);
  Status Leave(const Status& why);

  // I/O thread: sends a request to the scheduler (or fails it: a sticky error, the job over),
  // keeping it to ask again until answered.
  void SendToScheduler(std::unique_ptr<Command> c);
  // Asks the scheduler again for the requests it has not answered that are due.
  void ResendRequests();
  bool has_requests() const { return !sent_.empty(); }
  // The scheduler's news changed: fails the calls it ends, answers a finish that arrived.
  void OnMembership();

 private:
  // A request to the scheduler, waited for (timeout_ms < 0: request_timeout_ms); refused with the
  // sticky error, if any, unless `despite_sticky` (Leave: a worker failing for that error says so).
  Result<Header> ControlCall(Header h, const std::string& what, int64_t timeout_ms = -1, bool despite_sticky = false);
  // Clock() after pushes to a BSP table: waits (request_timeout_ms) until every push and Clock
  // sent before is answered; DeadlineExceeded, sticky, names what was not.
  Status WaitForEarlierPushesAndClocks();
  int num_servers() const { return static_cast<int>(control_.cluster().servers.size()); }
  int64_t ResendIntervalMs() const { return std::max(4 * options_.heartbeat_interval_ms, 100); }

  const ClientOptions& options_;
  ControlChannel& control_;  // calling threads: cluster() and rank() only (fixed once registered)
  ClientState& state_;
  RequestTable& requests_;
  CallSender& sender_;

  // Finish() once at a time: a second finds it done. First in the client's lock order: taken
  // before the reply socket's lock, ServerLinks' send_mu and the leaves.
  Mutex finish_mu_;

  // I/O thread: the scheduler's requests with no answer yet, each sent again (same request id)
  // every ResendIntervalMs while a caller waits for it; next_resend_ms_ is the earliest resend_ms.
  struct SentRequest {
    Header header;
    int64_t resend_ms;
  };
  std::map<uint64_t, SentRequest> sent_;
  int64_t next_resend_ms_ = 0;
};

}  // namespace internal
}  // namespace pushpull
