// The consistency rules, in one place (DESIGN.md "Consistency: exact semantics").
//
// Each worker w has a clock c_w, starting at 0; Clock() ends iteration c_w and the server
// receives the new value c_w + 1. A push issued at clock c is tagged c. A pull issued at clock c
// on a table with bound s is served once every live worker's clock is >= c - s:
//   BSP  s = 0     (and pushes of clock c are summed and applied once, as their mean, when every
//                   live worker has finished clock c)
//   SSP  s = k
//   ASP  unbounded (never waits)
// Because a worker's pushes reach a server over one ordered connection before its Clock, a
// worker whose clock is c' has delivered every push tagged below c'; so the rule above is
// exactly "the pull sees every update tagged below c - s from every live worker".
// Read-my-writes: a worker's own pushes are applied in order before its later pulls (same
// connection, same update thread per row); under BSP a push becomes visible when its clock closes.
//
// Threading: used only by the server's I/O thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "pushpull/status.h"

namespace pushpull::consistency {

// May a pull at clock `c` on a table with bound `bound` (-1: ASP) be served when the slowest
// live worker's clock is `min_live`?
inline bool PullReady(int64_t c, int64_t bound, int64_t min_live) { return bound < 0 || min_live >= c - bound; }
// The smallest min-live-clock at which such a pull is ready.
inline int64_t PullReadyAt(int64_t c, int64_t bound) { return bound < 0 ? INT64_MIN : c - bound; }
// Staleness recorded for a pull: own clock minus the slowest live worker's clock (>= 0).
inline int64_t PullStaleness(int64_t c, int64_t min_live) {
  return (min_live == std::numeric_limits<int64_t>::max() || c <= min_live) ? 0 : c - min_live;
}

// The vector of worker clocks one server has received.
class ClockVector {
 public:
  explicit ClockVector(int num_workers = 0, int64_t start = 0)
      : clock_(num_workers, start), alive_(num_workers, 1), start_(start) {}
  // Every worker at clock `start` (0; a restored job's checkpoint clock).
  void Reset(int num_workers, int64_t start = 0) { *this = ClockVector(num_workers, start); }

  int size() const { return static_cast<int>(clock_.size()); }
  bool alive(int w) const { return w >= 0 && w < size() && alive_[w]; }
  int64_t clock(int w) const { return clock_[w]; }
  int64_t start() const { return start_; }  // every worker's first clock
  int live_count() const;

  // A Clock message: the worker's new clock must be exactly its current one plus one.
  Status Advance(int w, int64_t new_clock);
  // A worker declared dead whose last Clock() reached other servers and not this one: its clock
  // becomes what they agreed on (never lowered). False when it was there already.
  bool Raise(int w, int64_t clock) {
    if (w < 0 || w >= size() || clock <= clock_[w]) return false;
    clock_[w] = clock;
    return true;
  }
  // Removes a dead worker from the vector: it is no longer waited for.
  void MarkDead(int w) {
    if (w >= 0 && w < size()) alive_[w] = 0;
  }

  // Slowest and fastest live worker (max int64 / min int64 when none is alive).
  int64_t MinLive() const;
  int64_t MaxLive() const;

 private:
  std::vector<int64_t> clock_;
  std::vector<uint8_t> alive_;
  int64_t start_ = 0;
};

// Histogram of observed staleness, bucket i counts staleness i (the last bucket: >= its index).
class StalenessHistogram {
 public:
  static constexpr int kBuckets = 33;
  void Record(int64_t s) {
    ++counts_[s < 0 ? 0 : (s >= kBuckets - 1 ? kBuckets - 1 : s)];
    max_ = s > max_ ? s : max_;
  }
  const uint64_t* counts() const { return counts_; }
  int64_t max() const { return max_; }
  std::string ToString() const;

 private:
  uint64_t counts_[kBuckets] = {};
  int64_t max_ = 0;
};

}  // namespace pushpull::consistency
