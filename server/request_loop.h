// The server's request loop: the I/O thread's loop over its sockets. It receives each request on
// the data socket (a ZeroMQ ROUTER), decodes it, answers a repeat from the worker's request
// record, validates it (server/request_validation.h), then dispatches it: a Hello or a Clock is
// answered here, a push goes to the update threads (server/update_threads.h), a pull too once the
// min clock lets it (server/min_clock.h). When its stripes are done, Reply() sends its answer.
// Every few ms it also reads the scheduler's control channel (membership changes, table creation,
// checkpoint requests), keeps the heartbeats going and publishes metrics.
//
// Reading order: Run() -> ReceiveRequest() -> HandleData() -> LookUpRepeat(), Validate, then
// HandleClock() or HandleUpdate() -> UpdateThreads::Dispatch() -> Reply().
//
// Threading: every method runs on the I/O thread (the one that calls Server::Run), which owns
// the data socket and the control channel; no other thread touches them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/wire.h"
#include "pushpull/status.h"
#include "server/checkpoint_writer.h"
#include "server/min_clock.h"
#include "server/request.h"
#include "server/request_validation.h"
#include "server/server_context.h"
#include "server/server_metrics.h"
#include "server/tables.h"
#include "server/update_threads.h"
#include "server/worker_death.h"
#include "server/worker_state.h"

namespace pushpull::server {

class RequestLoop final : public Replier {
 public:
  // The parts of the server it drives, all owned by the server (server/server.cc).
  struct Parts {
    ServerContext* ctx;
    Transport* transport;
    ControlChannel* control;
    std::vector<WorkerState>* workers;
    Tables* tables;
    UpdateThreads* updates;
    MinClock* min_clock;
    CheckpointWriter* checkpoint;
    WorkerDeaths* deaths;
    const RequestValidator* validator;
    ServerMetrics* metrics;
  };
  explicit RequestLoop(const Parts& parts);
  RequestLoop(const RequestLoop&) = delete;
  RequestLoop& operator=(const RequestLoop&) = delete;

  // Binds the data socket (ServerOptions: bind_host, port, advertise_host, advertise_port).
  Status Bind();
  // The address other nodes reach the data socket at.
  const std::string& address() const { return address_; }

  // Serves until the job ends or the server is asked to stop, then stops the update threads and
  // answers what is left. OK when the job finished normally; otherwise why it stopped.
  Status Run();
  // Tells the scheduler this server stops and why: the job hears it now, not from this server's
  // silence a heartbeat timeout later (the control socket lingers 200 ms for it when closed).
  void SayDone(const Status& why);

  // Sends r's answer (its result, or its error) and frees it.
  void Reply(Request* r) override;

 private:
  // Receives up to a bounded batch of requests, keeping the heartbeats going.
  void HandleRouter();
  // Receives one message from the data socket, waiting up to `wait_ms` (0: not at all), and
  // handles it. False when none came.
  bool ReceiveRequest(int64_t wait_ms);
  void HandleData(Message& m);
  void HandleHello(const Message& m);
  void HandleClock(const Message& m);
  // A validated push or pull of `shard`: built into a Request, dispatched or parked.
  void HandleUpdate(Message& m, table::TableShard* shard);
  // record: the answer goes into the sender's RequestRecord (a repeat gets it again).
  void ReplyError(const Message& m, const Status& st, bool record = true);
  // Sends m's sender a reply of `type` without payload; returns it.
  Header SendBareReply(const Message& m, MsgType type, uint32_t table, int64_t clock, const Status& st);
  // Records the answer sent to a request in its worker's RequestRecord.
  void Answered(const Header& request, const Header& reply);
  enum class Repeat { kNo, kHandled, kServeAgain };  // kServeAgain: a pull answered already
  Repeat LookUpRepeat(const Message& m);
  void CountBad(const Status& st, const char* what);
  // The scheduler's messages: membership changes, kCreateTable, kCheckpoint.
  void HandleControl();
  void CreateTable(const Message& m);

  ServerContext* const ctx_;
  ControlChannel* const control_;
  std::vector<WorkerState>* const workers_;
  Tables* const tables_;
  UpdateThreads* const updates_;
  MinClock* const min_clock_;
  CheckpointWriter* const checkpoint_;
  WorkerDeaths* const deaths_;
  const RequestValidator* const validator_;
  ServerMetrics* const metrics_;
  Transport* const transport_;
  std::unique_ptr<Socket> router_;  // the data socket (a router), made by Bind()
  std::string address_;
  std::vector<Frame> frames_;
  // Log lines so far, malformed messages and refused requests apart: the first 20 of each, then
  // one in 1000 (a flood of one kind does not silence the other).
  uint64_t malformed_logged_ = 0, refused_logged_ = 0, lost_logged_ = 0;
};

}  // namespace pushpull::server
