// The pushpull side of the transport and zmq_ceiling benches: the in-process cluster a case runs
// on (a LocalCluster: scheduler and servers as threads of this process, over tcp loopback), its
// tables, and the driver (harness.h) that moves a case's bytes through pushpull's client.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/bench/harness.h"
#include "optimizers/optimizer.h"
#include "tests/support/local_cluster.h"

namespace pushpull::bench {

// A table spec of the benches: zero-initialised, lr 1e-4.
TableSpec MakeSpec(const std::string& name, bool sparse, uint64_t rows, uint32_t dim, opt::Kind kind, Consistency c);

Consistency Asp();

// The in-process cluster every case runs on: S servers with K update threads each (1: what a
// server defaults to on a 2-core machine), W workers.
LocalClusterConfig BenchCluster(int S, int W, int K = 1);

// Starts the cluster and creates a dense table of `bytes` (dim 1024) through its first client.
Result<Table> StartWithDenseTable(LocalCluster& cl, const std::string& name, size_t bytes);

// The SGD of the benches' tables (MakeSpec's), for raw servers that apply pushes. Lives as long
// as the process.
const opt::Optimizer* BenchSgd();

// pushpull's driver: one worker's operations through its Client. Pushes send one warm shared
// buffer zero-copy and pulls are read in place (into a PulledRows view), as the raw baseline
// sends from and receives into its own buffers. Issue() and WaitOldest() are defined here so that
// RunLoop's calls to them inline, as the raw driver's do.
class PushPullDriver {
 public:
  // keys: a sparse case's key set (shared: sent zero-copy, as the raw baseline sends its keys);
  // null for a dense table.
  PushPullDriver(Client& c, const Table& t, size_t floats, Client::KeyBuffer keys, int bufs, int64_t wait_ms)
      : c_(c),
        t_(t),
        keys_(std::move(keys)),
        wait_ms_(wait_ms),
        src_(std::make_shared<const std::vector<float>>(floats, 1e-3f)),
        views_(std::max(bufs, 1)) {}  // one per op in flight: a slot is reused once its op is done
  // Pulls still in flight land in views_: wait for them (a Future whose wait expires is
  // abandoned: the client then drops its reply).
  ~PushPullDriver() {
    for (auto& fs : q_)
      for (auto& f : fs) f.WaitFor(100).IgnoreError();
  }

  bool Issue(Op op) {
    std::vector<Future> fs;
    if (op != Op::kPull) {
      // A warm shared gradient buffer, sent zero-copy (as the raw baseline sends its buffer).
      fs.push_back(keys_ ? c_.Push(t_, keys_, src_) : c_.PushDense(t_, src_));
    }
    if (op != Op::kPush) {
      PulledRows* view = &views_[slot_];
      slot_ = (slot_ + 1) % views_.size();
      // The zero-copy views (values read in place, as the raw baseline reads its frames): the
      // keys' rows, or the whole dense table (no keys).
      PullOptions into_view;
      into_view.keys = keys_;
      into_view.view = view;
      fs.push_back(c_.Pull(t_, into_view));
    }
    q_.push_back(std::move(fs));
    return true;
  }
  bool WaitOldest() {
    if (q_.empty()) return true;
    std::vector<Future> fs = std::move(q_.front());
    q_.pop_front();
    for (auto& f : fs) {
      Status st = f.WaitFor(wait_ms_);
      if (!st.ok()) {
        error_ = st.ToString();
        for (auto& g : fs) g.WaitFor(100).IgnoreError();  // abandon the rest of this op
        return false;
      }
    }
    return true;
  }
  size_t outstanding() const { return q_.size(); }
  std::string error() const { return error_; }

 private:
  Client& c_;
  Table t_;
  const Client::KeyBuffer keys_;
  const int64_t wait_ms_;
  std::shared_ptr<const std::vector<float>> src_;
  std::vector<PulledRows> views_;
  size_t slot_ = 0;
  std::deque<std::vector<Future>> q_;
  std::string error_;
};

}  // namespace pushpull::bench
