// The job's state over HTTP (SchedulerOptions::metrics_port; common/daemon/metrics.h): workers live,
// dying, awaiting a replacement, dead and finished; servers; tables; barriers; checkpoints. The
// loop publishes a snapshot of its state after each pass; the endpoint renders the last one.
//
// Threading: Publish() on the scheduler's loop thread, Render() on the endpoint's own thread; the
// snapshot between them is guarded by mu_ (a leaf lock: nothing else is taken under it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/cluster.h"
#include "common/daemon/metrics.h"
#include "common/mutex.h"
#include "pushpull/status.h"

namespace pushpull::scheduler {

class Metrics {
 public:
  // What /metrics shows: copied from the loop's state.
  struct Snapshot {
    Membership membership;
    bool registered = false;
    size_t tables = 0, barrier_waiting = 0;
    size_t servers_registered = 0, workers_registered = 0;  // before the job starts
    int64_t committed_clock = -1;
    uint64_t checkpoints = 0;
  };

  // Serves at http://host:port/metrics (port 0: a free one). num_servers, num_workers: the job's.
  static Result<std::unique_ptr<Metrics>> Start(const std::string& host, int port, int num_servers, int num_workers);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  int port() const { return endpoint_->port(); }
  // Publishes *s, which gets the snapshot published before (the caller fills it again next time,
  // reusing its storage).
  void Publish(Snapshot* s) EXCLUDES(mu_);
  // The exposition of the last snapshot published (the endpoint's thread).
  std::string Render() const EXCLUDES(mu_);

 private:
  Metrics(int num_servers, int num_workers) : num_servers_(num_servers), num_workers_(num_workers) {}

  const int num_servers_, num_workers_;
  mutable Mutex mu_;
  Snapshot snapshot_ GUARDED_BY(mu_);
  // Last: destroyed, its thread stopped, before what Render() reads.
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace pushpull::scheduler
