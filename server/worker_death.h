// What a server does when the scheduler's membership says a worker died, was replaced or
// finished, and when a new client says hello for a rank:
// - dying (Membership::kWorkerDying): its requests are refused and its clock kept; this server
//   tells the scheduler its clock of every worker (kWorkerClocks, again each heartbeat while one
//   is dying), and the scheduler answers with the clock the servers agree it reached;
// - dead: no longer waited for (its clock leaves the min clock); its unfinished BSP sums dropped;
// - being replaced (kWorkerReplacing): refused until a new client says hello for the rank; that
//   client goes on from the rank's clock here, and what it redoes of the open clock is answered,
//   not applied twice;
// - finished: no longer waited for.
// A dead worker's last Clock() may have reached other servers and not this one: its clock is
// raised to the one they agreed on (never lowered), its pushes of the clocks passed counting.
//
// Threading: the I/O thread's only. Nothing that touches the shards (BSP sums dropped, pulls
// released) runs while a checkpoint is being written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/wire.h"
#include "server/checkpoint_writer.h"
#include "server/min_clock.h"
#include "server/server_context.h"
#include "server/tables.h"
#include "server/update_threads.h"
#include "server/worker_state.h"

namespace pushpull::server {

class WorkerDeaths {
 public:
  WorkerDeaths(ServerContext* ctx, ControlChannel* control, std::vector<WorkerState>* workers, MinClock* min_clock,
               Tables* tables, UpdateThreads* updates, const CheckpointWriter* checkpoint);
  WorkerDeaths(const WorkerDeaths&) = delete;
  WorkerDeaths& operator=(const WorkerDeaths&) = delete;

  // The scheduler's membership changed (ControlChannel::membership()).
  void OnMembership();
  // A Hello from worker rank w's client, whose receive socket is `session`. A client new to the
  // rank (another socket: a new process) numbers its requests from the start again, so its
  // record starts over; after another client of the rank, it takes that one's place. True when
  // the clock the new client heard the servers agreed on raised the rank's clock here: the caller
  // moves the min clock on (MinClock::Advance).
  bool OnHello(int w, std::string session, const Header& hello);
  // Each pass of the I/O loop: while a worker is dying, the worker clocks report again each
  // heartbeat (one lost with a dropped connection).
  void Tick();

 private:
  // A worker dying: this server's clock of every worker, for the scheduler (kWorkerClocks).
  void ReportWorkerClocks();
  // A dead worker's clock raised to the one the servers agreed on (Membership::worker_last_clock,
  // or a replacement's hello): its last Clock() reached other servers and not this one. False
  // when it was at or past it already.
  bool RaiseToAgreedClock(int w, int64_t agreed);
  // BSP: drops worker w's sums from the clock it had not finished on.
  void DropBspSums(int w);

  ServerContext* const ctx_;
  ControlChannel* const control_;
  std::vector<WorkerState>* const workers_;
  MinClock* const min_clock_;
  Tables* const tables_;
  UpdateThreads* const updates_;
  const CheckpointWriter* const checkpoint_;
  bool any_dying_ = false;             // the last membership had a dying worker
  int64_t next_clocks_report_ms_ = 0;  // while a worker is dying: sent again each heartbeat
};

}  // namespace pushpull::server
