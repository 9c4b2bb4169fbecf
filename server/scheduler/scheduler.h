// pushpull-scheduler: the control plane. Nodes register and receive their rank and the cluster
// map; tables are created here (and on every server); barriers; heartbeats, with a node declared
// dead after heartbeat_timeout_ms of silence and the others told; coordinated checkpoints and
// restoring from one; the job ends cleanly when every live worker is done. Never on the data path.
//
// Threading: Create(), PrepareRestore() and Run() on one thread at a time (a daemon's main
// thread); while Run() serves, it is the only thread touching the job's state. Stop() may be
// called from any thread, address() and metrics_port() too (fixed once created).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/transport.h"
#include "pushpull/status.h"

namespace pushpull::scheduler {

struct SchedulerOptions {
  std::string bind_host = "0.0.0.0";
  std::string advertise_host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port
  int num_servers = 1;
  int num_workers = 1;
  int heartbeat_timeout_ms = 5000;        // a node silent this long is declared dead
  int register_timeout_ms = 120000;       // every node must have registered by then
  int table_timeout_ms = 30000;           // servers must answer a table creation by then
  bool continue_on_worker_death = false;  // false: a dead worker aborts the job, naming it
  // Instead: a dead worker's rank waits this long for a new worker to register in its place (one
  // asking for that rank, or any), which resumes at the dead one's clock; the others wait for it
  // as for a slow worker. Past the wait the job aborts, naming the rank.
  bool wait_for_replacement = false;
  int replacement_timeout_ms = 90000;
  // Checkpoints (server/checkpoint/store.h): where Client::Checkpoint() has the servers write (empty:
  // Checkpoint() fails), how many complete ones to keep, how long the other workers get to ask
  // after the first did, and then the servers to write (each).
  std::string checkpoint_dir;
  int checkpoint_keep = 2;
  int checkpoint_timeout_ms = 600000;
  // Resume from the newest intact checkpoint under this directory, or from this checkpoint when
  // it is one (DIR/ckpt-NNNNNNNNNN) (empty: a fresh job).
  std::string restore_from;
  // Read every file of the checkpoint to restore once before the job starts, checking its CRC, and
  // take the newest intact one under restore_from (false: the servers find damage as they read,
  // and the job fails; for checkpoints too large to read twice).
  bool verify_restore = true;
  // Serve the job's state (workers live, dying, dead and finished; servers; tables; the last
  // checkpoint) over HTTP at http://bind_host:metrics_port/metrics in the Prometheus text format
  // (common/daemon/metrics.h; -1: not served, 0: a free port).
  int metrics_port = -1;
  // How the scheduler reaches the nodes (null: ZeroMQ). Tests inject faults through it.
  std::shared_ptr<Transport> transport;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  static Result<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options);
  // Resolves restore_from: the checkpoint to restore, every file of it read once for its checksum
  // when verify_restore (a damaged newest one passed over for the newest intact one before it).
  // May take a while for a large checkpoint, so a daemon calls it once its address is published
  // (nodes wait for the scheduler meanwhile); Run() calls it when it was not.
  virtual Status PrepareRestore() = 0;
  // Serves until the job ends. OK when every live worker finished; Aborted naming the node
  // otherwise (a dead server, a dead worker without continue_on_worker_death, ...).
  virtual Status Run() = 0;
  virtual void Stop() = 0;
  virtual const std::string& address() const = 0;
  virtual int metrics_port() const = 0;  // the port /metrics is served at (-1: not served)
};

}  // namespace pushpull::scheduler
