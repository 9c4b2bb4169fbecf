#include "tests/support/local_cluster.h"

#include "common/daemon/flags.h"
#include "common/time.h"
#include "worker/client_impl.h"

#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <thread>

namespace pushpull {

Status LocalCluster::Start() {
  config_.heartbeat_timeout_ms *= kTimeoutScale;
  scheduler::SchedulerOptions so;
  so.bind_host = "127.0.0.1";
  so.num_servers = config_.servers;
  so.num_workers = config_.workers;
  so.heartbeat_timeout_ms = config_.heartbeat_timeout_ms;
  so.register_timeout_ms = 30000;
  so.table_timeout_ms = config_.table_timeout_ms;
  so.continue_on_worker_death = config_.continue_on_worker_death;
  so.wait_for_replacement = config_.wait_for_replacement;
  so.replacement_timeout_ms = config_.replacement_timeout_ms;
  so.checkpoint_dir = config_.checkpoint_dir;
  so.restore_from = config_.restore_from;
  so.verify_restore = config_.verify_restore;
  so.checkpoint_timeout_ms = config_.checkpoint_timeout_ms;
  so.checkpoint_keep = config_.checkpoint_keep;
  so.metrics_port = config_.metrics ? 0 : -1;
  PP_ASSIGN_OR_RETURN(scheduler_, scheduler::Scheduler::Create(so));
  PP_RETURN_IF_ERROR(scheduler_->PrepareRestore());
  scheduler_thread_ = std::thread([this] { scheduler_status_ = scheduler_->Run(); });
  server_status_.resize(config_.servers);
  for (int i = 0; i < config_.servers; ++i) {
    server::ServerOptions o;
    o.bind_host = "127.0.0.1";
    o.control.scheduler = scheduler_->address();
    o.control.heartbeat_interval_ms = config_.heartbeat_interval_ms;
    o.control.scheduler_timeout_ms = 10000 * kTimeoutScale;
    o.control.requested_rank = i;
    o.update_threads = config_.update_threads;
    o.stats_every_ms = config_.stats_every_ms;
    o.copy_on_write_budget_bytes = config_.copy_on_write_budget_bytes;
    o.copy_on_write_wait_ms = config_.copy_on_write_wait_ms;
    o.metrics_port = config_.metrics ? 0 : -1;
    if (config_.server_options) config_.server_options(i, &o);
    PP_ASSIGN_OR_RETURN(auto srv, server::Server::Create(o));
    servers_.push_back(std::move(srv));
  }
  for (int i = 0; i < config_.servers; ++i)
    server_threads_.emplace_back([this, i] { server_status_[i] = servers_[i]->Run(); });
  clients_.resize(config_.workers);
  std::vector<Status> st(config_.workers);
  std::vector<std::thread> t;
  for (int w = 0; w < config_.workers; ++w) {
    t.emplace_back([&, w] {
      auto c = Connect(w, ClientOptionsFor(w));
      if (c.ok())
        clients_[w] = std::move(c.value());
      else
        st[w] = c.status();
    });
  }
  for (auto& th : t) th.join();
  for (auto& s2 : st) PP_RETURN_IF_ERROR(s2);
  return Status::OK();
}

void LocalCluster::StopServer(int s) {
  servers_[s]->Stop();
  if (server_threads_[s].joinable()) server_threads_[s].join();
}

void LocalCluster::RunWorkers(const std::function<void(Client&, int)>& fn) {
  std::vector<std::thread> t;
  for (int w = 0; w < static_cast<int>(clients_.size()); ++w)
    if (clients_[w]) t.emplace_back([&, w] { fn(*clients_[w], w); });
  for (auto& th : t) th.join();
}

Result<std::unique_ptr<Client>> LocalCluster::Connect(int w, const ClientOptions& o) const {
  std::shared_ptr<Transport> transport = config_.worker_transport ? config_.worker_transport(w) : nullptr;
  return transport ? internal::ConnectOver(o, std::move(transport)) : Client::Connect(o);
}

ClientOptions LocalCluster::ClientOptionsFor(int w) const {
  ClientOptions o;
  o.scheduler = config_.worker_scheduler_address ? config_.worker_scheduler_address(w, scheduler_->address())
                                                 : scheduler_->address();
  o.request_timeout_ms = config_.request_timeout_ms;
  o.heartbeat_interval_ms = config_.heartbeat_interval_ms;
  o.scheduler_timeout_ms = 10000 * kTimeoutScale;
  o.requested_rank = w;
  if (config_.client_options) config_.client_options(w, &o);
  return o;
}

Status LocalCluster::ReplaceClient(int w) {
  // Until the scheduler has declared the dead worker dead, it answers "not yet", and the client
  // asks again (common/control.cc) within its registration deadline.
  ClientOptions o = ClientOptionsFor(w);
  o.register_timeout_ms = config_.heartbeat_timeout_ms * 4 + 10000 * kTimeoutScale;
  auto c = Connect(w, o);
  if (!c.ok()) return c.status().Annotate("replacing worker " + std::to_string(w));
  clients_[w] = std::move(c.value());
  return Status::OK();
}

Status LocalCluster::FinishAndJoin() {
  Status first;
  for (auto& c : clients_) {
    if (!c) continue;
    Status st = c->Finish();
    if (!st.ok()) {
      if (first.ok()) first = st;
      c->Leave(st).IgnoreError();  // (as an app that fails says why: the job ends, not waits)
    }
  }
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  for (auto& t : server_threads_)
    if (t.joinable()) t.join();
  joined_ = true;
  return first.ok() ? scheduler_status_ : first;
}

LocalCluster::~LocalCluster() {
  clients_.clear();
  if (scheduler_) scheduler_->Stop();
  for (auto& s : servers_) s->Stop();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  for (auto& t : server_threads_)
    if (t.joinable()) t.join();
}

std::string BinDir() { return ExecutableDir(); }

int RunCommand(const std::string& cmd, int timeout_s, std::string* output) {
  return RunCommandLines(cmd, timeout_s, output, [](const std::string&) {});
}

int RunCommandLines(const std::string& cmd, int timeout_s, std::string* output,
                    const std::function<void(const std::string&)>& on_line) {
  std::string full = "timeout -s KILL " + std::to_string(timeout_s) + " " + cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (!f) return -1;
  std::array<char, 8192> buf;
  while (fgets(buf.data(), buf.size(), f)) {
    std::string line(buf.data());
    output->append(line);
    on_line(line);
  }
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

KillRun LaunchAndKill(const std::string& flags, const std::string& victim, const std::string& when, int sig) {
  KillRun r;
  pid_t pid = -1;
  std::string cmd = BinDir() + "/pushpull-launch --heartbeat_timeout_ms=1500 --heartbeat_interval_ms=200 " + flags;
  r.exit_code = RunCommandLines(cmd, 90, &r.output, [&](const std::string& line) {
    std::string tag = "started " + victim + " (pid ";
    auto at = line.find(tag);
    if (at != std::string::npos) pid = std::stoi(line.substr(at + tag.size()));
    if (!r.killed && pid > 0 && line.find(when) != std::string::npos) {
      kill(pid, sig);
      r.killed = true;
    }
  });
  return r;
}

}  // namespace pushpull
