#include "apps/bench/pushpull_side.h"

namespace pushpull::bench {
namespace {

// LocalCluster's 1.5 s default declares a server dead here under 64 MB x 4 workers: its heartbeat
// goes out from the same I/O thread that moves the data (not what these benches measure).
constexpr int kHeartbeatTimeoutMs = 10000;

}  // namespace

TableSpec MakeSpec(const std::string& name, bool sparse, uint64_t rows, uint32_t dim, opt::Kind kind, Consistency c) {
  TableSpec s;
  s.name = name;
  s.sparse = sparse;
  s.rows = sparse ? 0 : rows;
  s.dim = dim;
  s.init = InitKind::kZeros;
  s.optimizer.kind = kind;
  s.optimizer.lr = 1e-4f;
  s.consistency = c;
  return s;
}

Consistency Asp() {
  Consistency c;
  c.model = Consistency::kAsp;
  return c;
}

LocalClusterConfig BenchCluster(int S, int W, int K) {
  LocalClusterConfig lc;
  lc.servers = S;
  lc.workers = W;
  lc.update_threads = K;
  lc.request_timeout_ms = static_cast<int>(kWaitMs);
  lc.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
  return lc;
}

Result<Table> StartWithDenseTable(LocalCluster& cl, const std::string& name, size_t bytes) {
  const uint32_t dim = 1024;
  Status st = cl.Start();
  if (!st.ok()) return st;
  return cl.client(0).CreateTable(MakeSpec(name, false, bytes / 4 / dim, dim, opt::Kind::kSgd, Asp()));
}

const opt::Optimizer* BenchSgd() {
  static const std::unique_ptr<opt::Optimizer> sgd =
      opt::Optimizer::Create(MakeSpec("sgd", false, 1, 1, opt::Kind::kSgd, Asp()).optimizer);
  return sgd.get();
}

}  // namespace pushpull::bench
