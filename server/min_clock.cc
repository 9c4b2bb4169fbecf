#include "server/min_clock.h"

#include <algorithm>
#include <limits>

#include "common/memory.h"

namespace pushpull::server {

MinClock::MinClock(ServerContext* ctx, Tables* tables, UpdateThreads* updates, std::vector<WorkerState>* workers)
    : ctx_(ctx), tables_(tables), updates_(updates), workers_(workers) {}

void MinClock::Park(std::unique_ptr<Request>* owned) {
  const Header& h = (*owned)->msg.header;
  parked_.emplace(consistency::PullReadyAt(h.clock, (*owned)->shard->spec().consistency.bound()), owned->get());
  Request* r = owned->release();
  ++(*workers_)[r->msg.header.sender_rank].parked;
  ++ctx_->stats.parked_pulls;
  ++ctx_->stats.parked_now;
}

bool MinClock::Parks(const table::TableShard* t) const {
  for (const auto& [at, r] : parked_)
    if (r->shard == t) return true;
  return false;
}

void MinClock::PreparePull(Request* r, int64_t min_live) {
  const Header& h = r->msg.header;
  const int64_t s = consistency::PullStaleness(h.clock, min_live);
  r->staleness = static_cast<int32_t>(s);
  // A dense pull of parameters is sent from the parameters themselves, a values frame per
  // stripe, without a copy (copy-on-write: the pull still sees exactly the updates applied
  // before it). So is each stripe's part of a keyed pull whose rows that stripe holds as one run,
  // which its update thread finds out (Stripe::ReadOrShare; else it gathers them, in parallel
  // with the other stripes); over several stripes the reply holds each stripe's rows in turn
  // (kFlagByStripe), and the client places them. Optimizer slots are gathered into one buffer,
  // and so are small pulls that span stripes (one small copied frame rather than several) and
  // keyed pulls of a dense table that span stripes.
  int stripes = 0;
  for (const table::RowSelection& sel : r->sel) stripes += sel.size() > 0;
  const bool large = h.row_count() * h.dim * sizeof(float) > kInlineBytes;
  const bool range = h.flags & kFlagRange;
  // (A client places a reply's stripes by a key's hash: sparse tables only.)
  // (A lookup's rows not there are made up in its reply: gathered too.)
  const bool in_place =
      h.slot < 0 && !(h.flags & kFlagNoCreate) && (stripes <= 1 || (large && (range || r->shard->spec().sparse)));
  if (in_place)
    r->shared.resize(r->sel.size());
  else
    r->out = NewFloatBuffer(h.row_count() * h.dim);
  // (Counted once its reply buffer is there: out of memory for it leaves the pull parked.)
  staleness_.Record(s);
  if (s > ctx_->stats.max_staleness) ctx_->stats.max_staleness = s;
}

void MinClock::Advance() {
  const int64_t m = clocks_.MinLive();
  // (Pulls parked at or below the minimum are served even when it did not move: a pass that
  // threw, out of memory for a reply, left them.)
  if (m <= min_live_ && m != std::numeric_limits<int64_t>::max() &&
      (parked_.empty() || parked_.begin()->first > min_live_))
    return;
  // The minimum may jump several clocks (a slow worker dies or finishes). It is stepped up to each
  // point where something happens, in order, so that a pull parked until the minimum reaches k
  // is served after BSP's clocks below k are applied and before clock k is: it sees exactly the
  // updates tagged below its own clock.
  const std::vector<std::unique_ptr<table::TableShard>>& tables = tables_->all();
  while (true) {
    int64_t next = m;
    for (auto& t : tables)
      if (t && t->spec().consistency.model == Consistency::kBsp && !t->bsp_contributors.empty())
        next = std::min(next, t->bsp_contributors.begin()->first + 1);
    if (!parked_.empty()) next = std::min(next, parked_.begin()->first);
    min_live_ = std::max(min_live_, next);
    // BSP: every clock below the minimum is complete; apply its mean once, in clock order,
    // before any pull released below can read.
    for (auto& t : tables) {
      if (!t || t->spec().consistency.model != Consistency::kBsp) continue;
      auto& open = t->bsp_contributors;
      while (!open.empty() && open.begin()->first < min_live_) {
        // The mean over the workers that took part in the clock: every one whose clock passed it
        // (it finished the clock, whether or not it pushed here: a sparse table's rows get the
        // same divisor on every server, as one process with the whole batch would) and any that
        // pushed to it here and left before finishing it.
        const int64_t k = open.begin()->first;
        const std::vector<uint8_t>& pushed = open.begin()->second;
        int participants = 0;
        for (int w = 0; w < clocks_.size(); ++w)
          participants += (static_cast<size_t>(w) < pushed.size() && pushed[w]) || clocks_.clock(w) > k;
        auto* r = new Request;
        r->op = Request::kApplyBsp;
        r->shard = t.get();
        r->clock = open.begin()->first;
        // BSP's schedule step is the clock: the same on every server, whether or not a clock
        // brought this server any push (sparse tables), and so after a restore onto other servers.
        r->ctx.lr = opt::ScheduledLr(t->spec().optimizer, r->clock);
        t->table_step = std::max(t->table_step, r->clock + 1);
        r->ctx.grad_scale = participants > 0 ? 1.0f / participants : 0.0f;
        open.erase(open.begin());
        updates_->Dispatch(r);
      }
    }
    while (!parked_.empty() && parked_.begin()->first <= min_live_) {
      Request* r = parked_.begin()->second;
      // Its staleness against the slowest live worker now (m), not the step the minimum is
      // stepped through (which would report more than the pull has). Prepared while still
      // parked: out of memory for it leaves it there for the next pass.
      PreparePull(r, m);
      parked_.erase(parked_.begin());
      --(*workers_)[r->msg.header.sender_rank].parked;
      --ctx_->stats.parked_now;
      updates_->Dispatch(r);
    }
    if (min_live_ >= m) break;
  }
}

}  // namespace pushpull::server
