// The worker client (Client, include/pushpull/client.h): a thin class that composes its parts.
//   worker/futures.h        a call's state, Future and PulledRows, the waiter that receives
//   worker/requests.h       requests, the table of unanswered ones, the queue to the I/O thread
//   worker/client_state.h   what the parts share: the sticky error, stats, ids, tables, clock
//   worker/server_links.h   the sockets to the servers, Hello, reconnects and resending
//   worker/call_split.h     a push or pull split into per-server, per-block requests
//   worker/call_sender.h    a call's requests sent: frame limits, backpressure, ids, clocks
//   worker/control_calls.h  CreateTable, Clock, Barrier, Checkpoint, Finish, Leave; the scheduler
//   worker/reply_loop.h     the I/O thread and the handling of replies
//
// Calling threads send their requests themselves (ServerLinks::Send, under its send_mu); replies
// from every server come back on one socket, which whoever holds its lock receives: a thread
// waiting on a Future (no hand-off between threads on the reply path), or else the I/O thread,
// which drains it periodically and owns the control channel to the scheduler. Replies are
// matched to requests by id and complete Futures.
//
// Threading: the Client's methods may be called from any thread. The client's locks, in the
// order they may be taken (a lock is never taken while one after it is held):
//   1. ControlCalls::finish_mu_   held through Finish()
//   2. the reply socket's lock (ReceiverHandle::mu) or ServerLinks::send_mu_ (never both)
//   3. the leaves, never nested: ClientState::mu, RequestTable's, CommandQueue's, FutureState::mu
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/transport.h"
#include "pushpull/client.h"
#include "pushpull/status.h"
#include "worker/call_sender.h"
#include "worker/call_split.h"
#include "worker/client_state.h"
#include "worker/control_calls.h"
#include "worker/reply_loop.h"
#include "worker/requests.h"
#include "worker/server_links.h"

namespace pushpull {
namespace internal {

class ClientImpl final : public Client {
 public:
  // transport: how it reaches the job (Connect: ZeroMQ; tests: one that injects faults).
  ClientImpl(const ClientOptions& o, std::shared_ptr<Transport> transport);
  // Fails every call still pending (Aborted) and tells the scheduler nothing.
  ~ClientImpl() override;

  // Registers with the scheduler, connects to every server and starts the I/O thread.
  Status Start();

  int rank() const override { return control_.rank(); }
  int num_workers() const override { return control_.cluster().num_workers; }
  Consistency consistency() const override { return consistency_; }
  int num_servers() const override { return static_cast<int>(control_.cluster().servers.size()); }
  int64_t clock() const override { return state_.clock; }
  bool replacement() const override { return replacement_; }
  bool checkpoints_enabled() const override { return control_.cluster().checkpoints; }
  const std::string& restored_run() const override { return control_.cluster().restore_run; }

  Result<Table> CreateTable(const TableSpec& spec) override { return control_calls_.CreateTable(spec); }
  using Client::Push;
  Future Push(const Table& t, KeyBuffer keys, SharedFloats grads) override;
  Future PushDense(const Table& t, SharedFloats grads) override;
  Result<std::vector<uint32_t>> GroupByServer(const Table& t, std::vector<Key>* keys) override;

  Status Clock() override { return control_calls_.Clock(); }
  using Client::Checkpoint;
  Status Checkpoint(const std::string& run) override { return control_calls_.Checkpoint(run); }
  Status Barrier() override { return control_calls_.Barrier(); }
  Status Finish() override { return control_calls_.Finish(); }
  Status Leave(const Status& why) override { return control_calls_.Leave(why); }

  ClientStats stats() const override;

 protected:
  Future DoPull(const Table& t, const PullOptions& options) override;

 private:
  // Keyed pulls (o.keys set): into `out`, or kept in `view` (no copy); `create` false: a lookup
  // (kFlagNoCreate).
  Future PullKeys(const Table& t, const PullOptions& o);
  // Whole dense table (o.keys null): into `out`, or kept in `view`.
  Future PullWholeTable(const Table& t, const PullOptions& o);
  // Gives the call's requests its state, posts them and returns its Future.
  Future PostCall(std::shared_ptr<FutureState> fs, Commands cmds);

  // Declared in construction order; the transport first, so that it goes after every socket.
  const ClientOptions options_;    // resolved: every field set (worker/job_environment.h)
  const Consistency consistency_;  // options_.consistency
  const std::shared_ptr<Transport> transport_;
  ControlChannel control_;  // the I/O thread's after Start(); cluster() and rank() fixed by then
  ClientState state_;
  RequestTable requests_;
  CommandQueue queue_;
  ServerLinks links_;
  CallSender sender_;
  ControlCalls control_calls_;
  ReplyLoop loop_;
  bool replacement_ = false;  // set in Start(): took a dead worker's place mid-job
};

// Client::Connect over the given transport (tests inject faults through it).
Result<std::unique_ptr<Client>> ConnectOver(const ClientOptions& options, std::shared_ptr<Transport> transport);

}  // namespace internal
}  // namespace pushpull
