// pushpull-server: holds its shards of every table (values and optimizer state), applies pushes
// through the optimizer, answers pulls, and enforces each table's consistency model.
//
// Threading (DESIGN.md "Threading"): the thread that calls Run() is the I/O thread; it owns the
// ROUTER, the control channel, the clock vector and all request bookkeeping. `update_threads`
// update threads each own one stripe of every table, so applying an update takes no lock. Work
// goes to them through single-producer queues and comes back over an inproc socket.
// Stop() and stats() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "common/control.h"
#include "pushpull/status.h"

namespace pushpull::server {

struct ServerOptions {
  ControlOptions control;
  std::string bind_host = "0.0.0.0";             // interface to listen on
  std::string advertise_host = "127.0.0.1";      // address other nodes use to reach this server
  int port = 0;                                  // 0: an ephemeral port
  int advertise_port = 0;                        // port other nodes use, when not the one bound (NAT, port forwarding)
  int update_threads = 1;                        // stripes per table
  int64_t max_message_bytes = int64_t(2) << 30;  // larger messages are dropped by ZeroMQ
  int64_t stats_every_ms = 0;                    // log a line of rates and state this often (0: never)
  // Copy-on-write (server/table/copy_on_write.h): memory for parameter arrays that pull replies still
  // hold while pushes go on to another array. Over it, a push waits for a reply to be sent, at
  // most copy_on_write_wait_ms, then copies anyway (logged).
  size_t copy_on_write_budget_bytes = size_t(64) << 20;
  int64_t copy_on_write_wait_ms = 1000;
  // What this server's tables may hold: their rows' parameters, optimizer slots, step counts and
  // (sparse) key index. A table creation, restore, or request adding sparse rows past it is
  // refused with ResourceExhausted, naming the table, and the server goes on serving; without
  // it a worker pushing ever new keys grows the server until the machine kills it.
  size_t max_table_bytes = std::numeric_limits<size_t>::max();
  // Serve this server's counters and gauges over HTTP at http://bind_host:metrics_port/metrics, in
  // the Prometheus text format (common/daemon/metrics.h; -1: not served, 0: a free port).
  int metrics_port = -1;
  // How the server reaches workers and the scheduler (null: ZeroMQ). Tests inject faults through it.
  std::shared_ptr<Transport> transport;
};

struct ServerStats {
  std::atomic<uint64_t> pushes{0}, pulls{0}, clocks{0};
  std::atomic<uint64_t> bad_messages{0};  // malformed: dropped or answered with an error
  std::atomic<uint64_t> rejected{0};      // well-formed but refused (bad rows, NaN, ...)
  std::atomic<uint64_t> duplicates{0};    // requests asked again: answered once, never run twice
  std::atomic<uint64_t> parked_pulls{0};  // pulls that had to wait for slower workers
  std::atomic<uint64_t> parked_now{0};    // pulls waiting right now
  std::atomic<uint64_t> bytes_in{0}, bytes_out{0};
  std::atomic<int64_t> max_staleness{0};
  // Copy-on-write budget (ServerOptions): pushes that waited for a pull reply to be sent, and
  // those that then copied over the budget. Brought up to date every few ms and at the end.
  std::atomic<uint64_t> copy_on_write_waits{0}, copy_on_write_overdrafts{0};
  std::atomic<uint64_t> tables{0};       // tables this server holds a shard of
  std::atomic<uint64_t> table_bytes{0};  // what they hold, as max_table_bytes counts it
  std::atomic<uint64_t> checkpoints{0};  // checkpoint files this server wrote
};

class Server {
 public:
  virtual ~Server() = default;
  // Binds its socket; does not contact the scheduler yet.
  static Result<std::unique_ptr<Server>> Create(const ServerOptions& options);

  // Registers with the scheduler, then serves until the job ends. OK when the job finished
  // normally; an error naming the cause otherwise (scheduler lost, job aborted, ...).
  virtual Status Run() = 0;
  virtual void Stop() = 0;
  virtual const std::string& address() const = 0;
  virtual int rank() const = 0;  // -1 before registration
  virtual const ServerStats& stats() const = 0;
  virtual int metrics_port() const = 0;  // the port /metrics is served at (-1: not served)
};

}  // namespace pushpull::server
