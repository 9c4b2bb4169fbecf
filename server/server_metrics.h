// What an operator sees of a server: the counters and gauges served at /metrics in the
// Prometheus text format (ServerOptions::metrics_port, common/daemon/metrics.h), and the stats line
// logged every ServerOptions::stats_every_ms.
//
// Threading: Render() runs on the metrics endpoint's thread and reads only atomics (the
// counters, the budgets) and the snapshot, which the I/O thread publishes every control pass
// under mu_ (Publish). Everything else is the I/O thread's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/control.h"
#include "common/daemon/metrics.h"
#include "common/mutex.h"
#include "pushpull/status.h"
#include "server/checkpoint_writer.h"
#include "server/consistency/rules.h"
#include "server/min_clock.h"
#include "server/server_context.h"
#include "server/tables.h"

namespace pushpull::server {

class ServerMetrics {
 public:
  ServerMetrics(ServerContext* ctx, const Tables* tables, const MinClock* min_clock, const CheckpointWriter* checkpoint,
                const ControlChannel* control);
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Serves /metrics at http://host:port (0: a free port).
  Status Serve(const std::string& host, int port);
  int port() const { return endpoint_ ? endpoint_->port() : -1; }  // -1: not served

  // Each control pass of the I/O loop: the budgets' counters into ServerStats, and the request
  // loop's own state into the snapshot /metrics shows (when served).
  void Update() EXCLUDES(mu_);
  // The copy-on-write budget's counters into ServerStats.
  void CopyBudgetCounters();
  // One line an operator can follow a long job by: rates since the last line, where the slowest
  // worker is, what is waiting, what was refused, and memory. `now`: NowMs().
  void LogStats(int64_t now);
  void StartLogging(int64_t now) { logged_.at = now; }

 private:
  // The request loop's own state that /metrics shows.
  struct Snapshot {
    int64_t slowest_clock = -1;  // of the live workers (-1: none)
    consistency::StalenessHistogram staleness;
    uint64_t membership_version = 0;
  };
  // What /metrics serves (on the metrics thread).
  std::string Render() const EXCLUDES(mu_);

  ServerContext* const ctx_;
  const Tables* const tables_;
  const MinClock* const min_clock_;
  const CheckpointWriter* const checkpoint_;
  const ControlChannel* const control_;
  // Lock order: a leaf (nothing else is taken while it is held).
  mutable Mutex mu_;
  Snapshot snapshot_ GUARDED_BY(mu_);
  // LogStats: the counters when it last logged.
  struct {
    int64_t at = 0;
    uint64_t pushes = 0, pulls = 0, clocks = 0, bytes_in = 0, bytes_out = 0;
  } logged_;
  // Declared after everything Render reads: destroyed, its thread stopped, before them.
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace pushpull::server
