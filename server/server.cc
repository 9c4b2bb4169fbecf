// pushpull-server: Server::Create and the class that composes a server from its parts, each with
// one job (their headers say what runs on which thread):
//   server/request_loop.h       the I/O thread's loop: receive, decode, dispatch, reply; control
//   server/request_validation.h the checks a request passes before anything of it is applied
//   server/update_threads.h     the update threads, the queues to them and what they apply
//   server/min_clock.h          the workers' clocks, the min clock and the pulls parked on it
//   server/worker_state.h       what the server keeps about each worker rank
//   server/worker_death.h       dying, dead, replaced and finished workers
//   server/tables.h             the tables: creation and restore
//   server/checkpoint_writer.h  checkpoints written on the scheduler's request
//   server/server_metrics.h     /metrics and the stats line
#include "server/server.h"

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/log.h"
#include "common/wire.h"
#include "optimizers/optimizer.h"
#include "server/checkpoint_writer.h"
#include "server/min_clock.h"
#include "server/request_loop.h"
#include "server/request_validation.h"
#include "server/server_context.h"
#include "server/server_metrics.h"
#include "server/tables.h"
#include "server/update_threads.h"
#include "server/worker_death.h"
#include "server/worker_state.h"

namespace pushpull::server {
namespace {

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(const ServerOptions& o)
      : ctx_(o),
        transport_(o.transport ? o.transport : NewZmqTransport()),
        control_(*transport_, Role::kServer, o.control),
        tables_(&ctx_, &control_),
        updates_(transport_.get(), tables_.cow_budget()),
        min_clock_(&ctx_, &tables_, &updates_, &workers_),
        checkpoint_(&ctx_, &control_, &tables_, &min_clock_, &workers_, &updates_),
        deaths_(&ctx_, &control_, &workers_, &min_clock_, &tables_, &updates_, &checkpoint_),
        validator_(&ctx_, &workers_, &min_clock_, &tables_),
        metrics_(&ctx_, &tables_, &min_clock_, &checkpoint_, &control_),
        loop_({&ctx_, transport_.get(), &control_, &workers_, &tables_, &updates_, &min_clock_, &checkpoint_, &deaths_,
               &validator_, &metrics_}) {}

  Status Init() {
    PP_RETURN_IF_ERROR(loop_.Bind());
    PP_RETURN_IF_ERROR(updates_.Bind());
    if (ctx_.options.metrics_port >= 0)
      PP_RETURN_IF_ERROR(metrics_.Serve(ctx_.options.bind_host, ctx_.options.metrics_port));
    return Status::OK();
  }

  Status Run() override;
  void Stop() override { ctx_.stop = true; }
  const std::string& address() const override { return loop_.address(); }
  int rank() const override { return ctx_.rank; }
  const ServerStats& stats() const override { return ctx_.stats; }
  int metrics_port() const override { return metrics_.port(); }

 private:
  // Declared in the order they are built: each part is given those declared before it.
  ServerContext ctx_;
  const std::shared_ptr<Transport> transport_;  // outlives every socket the parts make from it
  ControlChannel control_;
  std::vector<WorkerState> workers_;  // by worker rank, sized at registration
  Tables tables_;
  UpdateThreads updates_;
  MinClock min_clock_;
  CheckpointWriter checkpoint_;
  WorkerDeaths deaths_;
  RequestValidator validator_;
  // After everything its /metrics rendering reads: destroyed, its thread stopped, before them.
  ServerMetrics metrics_;
  RequestLoop loop_;
};

Status ServerImpl::Run() {
  control_.SetStop(&ctx_.stop);
  Status st = control_.Register(loop_.address());
  if (!st.ok()) return st;
  ctx_.rank = control_.rank();
  SetLogTag("server " + std::to_string(ctx_.rank.load()));
  SetThreadName("pp-server-" + std::to_string(ctx_.rank.load()));
  opt::FlushDenormalsOnThisThread();  // (requests are applied on this thread too)
  const ClusterMap& cluster = control_.cluster();
  const int W = cluster.num_workers;
  min_clock_.Reset(W, cluster.start_clock);
  workers_.assign(W, WorkerState());
  for (WorkerState& w : workers_) w.hello_clock = cluster.start_clock;
  st = tables_.ReadRestore(cluster);
  if (!st.ok()) {
    loop_.SayDone(st);
    return st;
  }
  deaths_.OnMembership();
  const ServerOptions& o = ctx_.options;
  PP_LOG(Info) << "serving at " << loop_.address() << " (" << Count(W, "worker") << ", "
               << Count(cluster.servers.size(), "server") << ", " << Count(o.update_threads, "update thread")
               << (o.max_table_bytes == std::numeric_limits<size_t>::max()
                       ? std::string()
                       : ", tables up to " + std::to_string(o.max_table_bytes >> 20) + " MiB")
               << ")";
  updates_.Start(o.update_threads, &loop_);
  return loop_.Run();
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  // A dense pull reply carries a values frame per stripe: at most kMaxValueFrames.
  if (options.update_threads < 1 || options.update_threads > static_cast<int>(kMaxValueFrames))
    return Status::InvalidArgument("update_threads must be in [1, " + std::to_string(kMaxValueFrames) + "]");
  if (options.port < 0 || options.port > 65535 || options.advertise_port < 0 || options.advertise_port > 65535)
    return Status::InvalidArgument("port " + std::to_string(options.port) + " and advertise_port " +
                                   std::to_string(options.advertise_port) +
                                   " must be in [0, 65535] (0: any free port)");
  if (options.metrics_port < -1 || options.metrics_port > 65535)
    return Status::InvalidArgument("metrics_port " + std::to_string(options.metrics_port) +
                                   " must be in [0, 65535] (0: any free port), or -1 (not served)");
  PP_RETURN_IF_ERROR(options.control.Validate());
  auto s = std::make_unique<ServerImpl>(options);
  PP_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<Server>(std::move(s));
}

}  // namespace pushpull::server
