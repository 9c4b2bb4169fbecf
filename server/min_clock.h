// The clock of every worker as this server received it, the slowest live worker's clock (the
// "min clock"), and the pulls parked until it is high enough to serve them: pull admission under
// the consistency rules of server/consistency/rules.h. Moving the min clock up also applies BSP clocks
// once every live worker finished them (their means, in clock order, before any pull released
// at a later clock reads).
//
// Threading: the I/O thread's only. Requests it releases (BSP applies, parked pulls) go to the
// update threads through UpdateThreads::Dispatch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/wire.h"
#include "server/consistency/rules.h"
#include "server/request.h"
#include "server/server_context.h"
#include "server/tables.h"
#include "server/update_threads.h"
#include "server/worker_state.h"

namespace pushpull::server {

class MinClock {
 public:
  // A peer that parks this many pulls has the rest refused, rather than let the server's memory
  // grow with what it sends. A client never has more than kMaxUnansweredRequests unanswered here:
  // generous, since pulls a client gave up on may still be parked.
  static constexpr uint32_t kMaxParked = 4 * kMaxUnansweredRequests;

  MinClock(ServerContext* ctx, Tables* tables, UpdateThreads* updates, std::vector<WorkerState>* workers);
  MinClock(const MinClock&) = delete;
  MinClock& operator=(const MinClock&) = delete;

  // Every worker at clock `start` (0; a restored job's checkpoint clock).
  void Reset(int num_workers, int64_t start) { clocks_.Reset(num_workers, start); }
  // The workers' clocks: advanced by their Clock messages, raised and marked dead as the
  // scheduler says (server/worker_death.h). Advance() afterwards, for what that released.
  const consistency::ClockVector& clocks() const { return clocks_; }
  consistency::ClockVector& clocks() { return clocks_; }
  // The slowest live worker's clock as far as pulls and BSP clocks were released (max int64
  // when no worker is alive).
  int64_t min_live() const { return min_live_; }
  const consistency::StalenessHistogram& staleness() const { return staleness_; }

  // A pull at its worker's clock: may it be served now?
  bool Ready(const Request& r) const {
    return consistency::PullReady(r.msg.header.clock, r.shard->spec().consistency.bound(), min_live_);
  }
  // What a ready pull needs before it is handed on (its staleness, where its values go): out of
  // memory here throws with the pull still the caller's.
  void PreparePull(Request* r) { PreparePull(r, min_live_); }
  // Parks a pull not ready yet until the min clock reaches it, taking it from *owned; false
  // (nothing taken) when its worker has kMaxParked parked already.
  bool MayPark(int worker) const { return (*workers_)[worker].parked < kMaxParked; }
  void Park(std::unique_ptr<Request>* owned);
  // Parked pulls the min clock released already (a pass that ran out of memory for a reply left
  // them): Advance() serves them.
  bool HasReleased() const { return !parked_.empty() && parked_.begin()->first <= min_live_; }
  // Does a parked pull read from `t`?
  bool Parks(const table::TableShard* t) const;
  // At shutdown: each parked pull, given to f (which answers it) and freed.
  template <typename F>
  void DrainParked(F&& f) {
    for (auto& [at, r] : parked_) {
      f(r);
      delete r;
    }
    parked_.clear();
    for (WorkerState& w : *workers_) w.parked = 0;
    ctx_->stats.parked_now = 0;
  }

  // Moves the min clock up to the slowest live worker's clock, applying the BSP clocks and
  // serving the parked pulls that releases, in clock order. Not while a checkpoint is written
  // (both touch the shards).
  void Advance();

 private:
  void PreparePull(Request* r, int64_t min_live);

  ServerContext* const ctx_;
  Tables* const tables_;
  UpdateThreads* const updates_;
  std::vector<WorkerState>* const workers_;
  consistency::ClockVector clocks_;
  int64_t min_live_ = 0;
  std::multimap<int64_t, Request*> parked_;  // pulls by the min clock they need
  consistency::StalenessHistogram staleness_;
};

}  // namespace pushpull::server
