// The checks a request to a server passes before anything of it is applied: its sender is a live
// worker of this job and the rank's current client, its clock is its worker's (or, for a pull
// asked again, one it had), its table exists and holds its rows here, its shape and slot fit the
// table and the message limit, and a push's gradients are finite and bounded.
//
// Threading: the I/O thread's only; reads the per-worker state, the clocks and the tables.
#pragma once

#include <vector>

#include "common/wire.h"
#include "pushpull/status.h"
#include "server/min_clock.h"
#include "server/server_context.h"
#include "server/tables.h"
#include "server/worker_state.h"

namespace pushpull::server {

class RequestValidator {
 public:
  RequestValidator(const ServerContext* ctx, const std::vector<WorkerState>* workers, const MinClock* min_clock,
                   const Tables* tables)
      : ctx_(ctx), workers_(workers), min_clock_(min_clock), tables_(tables) {}

  // OK and *shard set to the request's table (left alone for a Clock), or why it is refused.
  // again: a pull answered already, asked again; its clock tag may be behind its worker's by now.
  Status Validate(const Message& m, table::TableShard** shard, bool again = false) const;

 private:
  const ServerContext* const ctx_;
  const std::vector<WorkerState>* const workers_;
  const MinClock* const min_clock_;
  const Tables* const tables_;
};

}  // namespace pushpull::server
