// A whole pushpull job as threads in one process, over real ZeroMQ tcp sockets on loopback
// with ephemeral ports: a scheduler, S servers and W connected clients.
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pushpull/client.h"
#include "server/scheduler/scheduler.h"
#include "server/server.h"

namespace pushpull {

// Sanitizer builds run 5 to 15 times slower: LocalCluster stretches its liveness timeouts (the
// scheduler's heartbeat timeout, the nodes' scheduler timeouts) by this much, and so do tests
// that set such timeouts themselves.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kTimeoutScale = 10;
#else
inline constexpr int kTimeoutScale = 1;
#endif

struct LocalClusterConfig {
  int servers = 1;
  int workers = 1;
  int update_threads = 1;
  int64_t stats_every_ms = 0;  // servers' periodic stats line (0: none)
  int heartbeat_interval_ms = 100;
  int heartbeat_timeout_ms = 1500;
  int request_timeout_ms = 30000;
  int table_timeout_ms = 10000;  // the scheduler's: every server has created a table by then
  bool continue_on_worker_death = false;
  bool wait_for_replacement = false;  // the scheduler's --on_worker_death=wait
  int replacement_timeout_ms = 30000;
  std::string checkpoint_dir;  // the scheduler's --checkpoint_dir (empty: checkpoints off)
  std::string restore_from;    // the scheduler's --restore_from (empty: a fresh job)
  bool verify_restore = true;  // the scheduler's --verify_restore
  int checkpoint_timeout_ms = 600000;
  int checkpoint_keep = 2;
  size_t copy_on_write_budget_bytes = server::ServerOptions().copy_on_write_budget_bytes;  // per server
  int64_t copy_on_write_wait_ms = server::ServerOptions().copy_on_write_wait_ms;
  bool metrics = false;  // the scheduler and servers serve /metrics, each on a free port
  // The scheduler address worker w connects to, given the scheduler's own (unset: that one);
  // fault tests put a proxy in between.
  std::function<std::string(int w, const std::string& scheduler)> worker_scheduler_address;
  // Changes server s's options before it starts (fault tests: a proxy in front of it).
  std::function<void(int s, server::ServerOptions* o)> server_options;
  // Changes worker w's client options before it connects.
  std::function<void(int w, ClientOptions* o)> client_options;
  // The transport worker w's client reaches the job over (unset or null: ZeroMQ); fault tests
  // give a FaultTransport (tests/support/fault_transport.h). Servers take theirs in
  // server_options (ServerOptions::transport).
  std::function<std::shared_ptr<Transport>(int w)> worker_transport;
};

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterConfig c) : config_(c) {}
  ~LocalCluster();

  // Starts scheduler and servers and connects every client (in parallel).
  Status Start();
  Client& client(int w) { return *clients_[w]; }
  // Destroys client w without Finish(): to the scheduler it looks like a dead worker.
  void KillClient(int w) { clients_[w].reset(); }
  // Connects a new client asking for rank w (after KillClient(w), with wait_for_replacement): it
  // takes the dead worker's place once the scheduler has declared that one dead.
  Status ReplaceClient(int w);
  server::Server& server(int s) { return *servers_[s]; }
  // Stops server s (its thread returns): to the scheduler it looks like a dead server.
  void StopServer(int s);
  const std::string& scheduler_address() const { return scheduler_->address(); }
  int scheduler_metrics_port() const { return scheduler_->metrics_port(); }
  const LocalClusterConfig& config() const { return config_; }

  // Runs fn(client, rank) on one thread per worker and waits for all.
  void RunWorkers(const std::function<void(Client&, int)>& fn);
  // Finishes every remaining client; then the scheduler ends the job. Returns its status.
  Status FinishAndJoin();
  Status scheduler_status() const { return scheduler_status_; }
  Status server_status(int s) const { return server_status_[s]; }

 private:
  ClientOptions ClientOptionsFor(int w) const;
  Result<std::unique_ptr<Client>> Connect(int w, const ClientOptions& o) const;
  LocalClusterConfig config_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::thread scheduler_thread_;
  Status scheduler_status_;
  std::vector<std::unique_ptr<server::Server>> servers_;
  std::vector<std::thread> server_threads_;
  std::vector<Status> server_status_;
  std::vector<std::unique_ptr<Client>> clients_;
  bool joined_ = false;
};

// Binaries beside the test binary (build/bin).
std::string BinDir();
// Runs a shell command with a timeout, capturing stdout+stderr; returns the exit status.
int RunCommand(const std::string& cmd, int timeout_s, std::string* output);
// Same, calling on_line(line) for each line of output as it arrives.
int RunCommandLines(const std::string& cmd, int timeout_s, std::string* output,
                    const std::function<void(const std::string&)>& on_line);

// A job through pushpull-launch (heartbeat timeout 1.5 s, interval 0.2 s, then `flags`, at most
// 90 s) whose process `victim` ("worker 1", "server 0") is sent `sig` once a line of output
// contains `when`.
struct KillRun {
  int exit_code = -1;
  std::string output;
  bool killed = false;
};
KillRun LaunchAndKill(const std::string& flags, const std::string& victim, const std::string& when = "linreg epoch 2/",
                      int sig = SIGKILL);

}  // namespace pushpull
