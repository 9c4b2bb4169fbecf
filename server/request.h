// One unit of work for a server's update threads (a push, a pull, a BSP clock to apply or a dead
// worker's sum to drop) and the interface that answers it once its stripes are done.
//
// Threading: a Request is made and answered on the I/O thread. While it is handed to the update
// threads (server/update_threads.h), each of them touches only its own stripes' parts of it (sel,
// shared[k] of its stripes, out's rows of its stripes) and `pending`/`failed`/`error`; the last
// one to finish hands it back, and the I/O thread reads it again only after that.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "optimizers/optimizer.h"
#include "pushpull/status.h"
#include "server/table/shard.h"

namespace pushpull::server {

// Requests up to this size may run on the I/O thread (server/update_threads.h), and a pull this
// small that spans stripes is gathered into one reply frame (MinClock::PreparePull).
constexpr uint64_t kInlineBytes = 64 * 1024;

// sel[i] is the request's rows in stripe i (none: every stripe as a whole, kApplyBsp and
// kDropWorker); each update thread works on the stripes it owns (TableShard::ThreadOf).
struct Request {
  enum Op { kApply, kAccumulate, kRead, kApplyBsp, kDropWorker };
  Op op = kApply;
  Message msg;  // the request as received (frames read in place)
  table::TableShard* shard = nullptr;
  std::vector<table::RowSelection> sel;
  opt::StepContext ctx;
  int64_t clock = 0;             // kAccumulate / kApplyBsp / kDropWorker
  int worker = -1;               // kDropWorker: whose sum for `clock` to drop
  std::shared_ptr<float[]> out;  // kRead: reply values (uninitialised, then filled) ...
  // ... or, for a pull of parameters sent a stripe a frame, shared[k] for stripe k: its rows in
  // place (Stripe::ShareRows, ReadOrShare) or, for a keyed part not one run, gathered.
  std::vector<std::shared_ptr<const float>> shared;
  int32_t staleness = 0;
  std::atomic<int> pending{0};
  // Set by the first stripe whose part failed (out of memory, the tables' memory limit), before
  // its `pending` decrement; the request is then answered with it instead of its result.
  std::atomic<bool> failed{false};
  Status error;
  void Fail(Status st) {
    bool expected = false;
    if (failed.compare_exchange_strong(expected, true, std::memory_order_relaxed)) error = std::move(st);
  }
};

// Answers a request whose stripes are done and frees it (the request loop, which owns the data
// socket). Called on the I/O thread only.
class Replier {
 public:
  virtual void Reply(Request* r) = 0;

 protected:
  ~Replier() = default;
};

}  // namespace pushpull::server
