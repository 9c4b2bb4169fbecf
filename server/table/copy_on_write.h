// Copy-on-write of parameter arrays: a pull reply is sent from a stripe's parameters in place
// (no copy), and the next write to a block a reply still holds goes to another array
// (Stripe::BeginWrite, server/table/copy_on_write.cc). This header holds the memory budget those other
// arrays are counted against, and the array type that counts itself.
//
// Threading: a CopyOnWriteBudget is shared by every stripe of a server: update threads (and the
// I/O thread) take and give, ZeroMQ's I/O threads give when they free a reply. Counts are atomics;
// its one mutex only pairs a waiting write's last look with Released() (see mu_). A ParamArray is
// freed on whichever thread drops its last reference.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include "common/memory.h"
#include "common/mutex.h"
#include "server/table/memory.h"

namespace pushpull::table {

// The memory copy-on-write may take: parameter arrays that pull replies still hold after their
// stripe moved on to another array (Stripe::BeginWrite), over every stripe of a server. A write
// that would take more waits for a reply to let go of an array (it is being sent), so a server
// holds its tables plus at most `limit` bytes, however large they are; after `wait_ms` (a worker
// that does not read its replies) it copies anyway and says so. Thread-safe: update threads take
// and give, ZeroMQ's threads give when they free a reply.
class CopyOnWriteBudget {
 public:
  explicit CopyOnWriteBudget(size_t limit = std::numeric_limits<size_t>::max(), int64_t wait_ms = 1000)
      : bytes_(limit), wait_ms_(wait_ms) {}
  size_t limit() const { return bytes_.limit(); }
  int64_t wait_ms() const { return wait_ms_; }
  size_t used() const { return bytes_.used(); }
  // Takes `bytes` if they fit under the limit.
  bool TryTake(size_t bytes) { return bytes_.TryTake(bytes); }
  // Takes them regardless (a write that waited its deadline).
  void Take(size_t bytes) { bytes_.Take(bytes); }
  // Gives them back and wakes writes waiting for room.
  void Give(size_t bytes) EXCLUDES(mu_) {
    bytes_.Give(bytes);
    Released();
  }
  // A reply let go of an array: wakes writes waiting for one.
  void Released() EXCLUDES(mu_);
  // Would taking `bytes` go over the limit?
  bool WouldExceed(size_t bytes) const { return bytes_.WouldExceed(bytes); }
  // Sleeps until `ready()` holds or `until_ms` (NowMs() clock) passes; false on the deadline.
  // `ready` is evaluated under the budget's lock, after every Released().
  template <typename Ready>
  bool WaitUntil(int64_t until_ms, Ready&& ready) EXCLUDES(mu_);
  // Only threads that say so wait (the server's update threads); on any other a write that does
  // not fit copies over the limit at once (counted as an overdraft). The server's I/O thread
  // runs no write that would not fit (TableShard callers check WriteBudgetBytes first), so this
  // is a safety net there.
  static void SetThisThreadMayWait(bool may);
  static bool ThisThreadMayWait();

  // Counters for the server's stats line.
  std::atomic<uint64_t> waits{0};       // writes that waited for a reply
  std::atomic<uint64_t> overdrafts{0};  // writes that copied over the limit after wait_ms

 private:
  ByteBudget bytes_;
  const int64_t wait_ms_;
  std::atomic<int> waiters_{0};
  // Guards no member (the counts are atomics): a waiter's last look at the arrays (`ready`, run
  // under it) and its sleep are one step against Released(), which takes it before waking, so a
  // release between the two is not missed. Lock order: a leaf (`ready` takes no lock).
  Mutex mu_;
  CondVar cv_;
};

// A stripe's parameter array. One that is not the stripe's current array (a pull reply holds it,
// or it is the spare) counts `counted` bytes against the budget until it is freed.
struct ParamArray : FloatArray {
  explicit ParamArray(size_t n) : FloatArray(n) {}
  ParamArray(const ParamArray&) = delete;
  ParamArray& operator=(const ParamArray&) = delete;
  ~ParamArray() {
    if (counted) budget->Give(counted);
  }
  std::shared_ptr<CopyOnWriteBudget> budget;
  size_t counted = 0;
};

}  // namespace pushpull::table
