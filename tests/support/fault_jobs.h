// What the fault tests share: their small tables, the routing of one node's connections through a
// TcpProxy (which can hold, drop or cut them), and a pull that waits on a worker that dies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/local_cluster.h"
#include "tests/support/tcp_proxy.h"

namespace pushpull {

// A dense table of `rows` x 4: zeros, SGD with lr 0.1, BSP.
inline TableSpec Dense(const char* name, int rows) {
  TableSpec s;
  s.name = name;
  s.rows = rows;
  s.dim = 4;
  s.optimizer.lr = 0.1f;
  return s;
}

// Worker `rank`'s scheduler connection goes through `proxy`; the others' do not.
inline std::function<std::string(int, const std::string&)> WorkerControlThrough(TcpProxy& proxy, int rank) {
  return [&proxy, rank](int w, const std::string& scheduler) {
    if (w != rank) return scheduler;
    proxy.SetUpstream(scheduler);
    return proxy.address();
  };
}

// Server `rank`'s scheduler connection goes through `proxy`; the others' do not.
inline std::function<void(int, server::ServerOptions*)> ServerControlThrough(TcpProxy& proxy, int rank) {
  return [&proxy, rank](int s, server::ServerOptions* o) {
    if (s != rank) return;
    proxy.SetUpstream(o->control.scheduler);
    o->control.scheduler = proxy.address();
  };
}

// Worker data connections to server `rank` go through `proxy` (the server advertises the proxy's
// port); the scheduler's do not.
inline std::function<void(int, server::ServerOptions*)> DataThrough(TcpProxy& proxy, int rank,
                                                                    const std::string& host = "127.0.0.1") {
  return [&proxy, rank, host](int s, server::ServerOptions* o) {
    if (s != rank) return;
    o->port = TcpProxy::FreePort();
    o->advertise_host = host;
    o->advertise_port = proxy.port();
    proxy.SetUpstream("tcp://127.0.0.1:" + std::to_string(o->port));
  };
}

// Dense's table under ASP.
inline TableSpec AspZeros(const char* name, int rows) {
  TableSpec s = Dense(name, rows);
  s.init = InitKind::kZeros;
  s.consistency = *ParseConsistency("asp");
  return s;
}

// Worker 0, a clock ahead, pulls (which waits for worker 1 under BSP); worker 1 is killed. What
// the pull ends with, within `timeouts` heartbeat timeouts.
inline Status PullWhileWorker1Dies(LocalCluster& cluster, int timeouts) {
  auto t0 = cluster.client(0).CreateTable(Dense("w", 8));
  if (!t0.ok()) return t0.status().Annotate("test set-up");
  Status clocked = cluster.client(0).Clock();
  if (!clocked.ok()) return clocked.Annotate("test set-up");
  std::vector<float> v(32);
  Future waiting = cluster.client(0).PullDense(*t0, v.data());
  cluster.KillClient(1);
  return waiting.WaitFor(int64_t(cluster.config().heartbeat_timeout_ms) * timeouts);
}

}  // namespace pushpull
