// Per-app training throughput on the CPU backend (and fmnist_mlp on the GPU backend too where a
// GPU is usable), 1 and 2 workers against 2 servers (threads in this process over tcp loopback).
// Baselines measured in the same run: for 2 workers, the 1-worker figure (scaling); for
// fmnist_mlp, the backend's own compute rate with no parameter server at all (what the network
// and synchronisation cost), and the share of step time spent waiting on pulls.
#include <memory>
#include <vector>

#include "apps/bench/bench.h"
#include "apps/fmnist_mlp.h"
#include "apps/linreg.h"
#include "apps/mlp/backend.h"
#include "apps/sparse_lr.h"
#include "common/log.h"
#include "common/time.h"
#include "tests/support/local_cluster.h"

namespace pushpull::bench {
namespace {

// What a cluster run of an app measured: the workers' summed training throughput (data loading
// and setup excluded) and their mean share of step time spent waiting on pulls.
struct RunRate {
  double samples_per_s = 0;
  double wait_fraction = 0;
};

// Runs `app` on a 2-server cluster with `workers` workers; zeros when the run fails.
RunRate Throughput(int workers, const std::function<Status(Client&, AppResult*)>& app) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = workers;
  cfg.heartbeat_timeout_ms = 10000;
  LocalCluster cluster(cfg);
  if (!cluster.Start().ok()) return {};
  bool ok = true;
  std::vector<AppResult> results(workers);
  cluster.RunWorkers([&](Client& c, int w) {
    Status st = app(c, &results[w]);
    if (!st.ok()) {
      PP_LOG(Error) << st.ToString();
      ok = false;
    }
  });
  cluster.FinishAndJoin().IgnoreError();
  if (!ok) return {};
  RunRate r;
  for (const AppResult& a : results) {
    r.samples_per_s += a.samples_per_s;
    r.wait_fraction += a.wait_fraction / workers;
  }
  return r;
}

// The MLP's forward+backward alone on `device`, batches of `batch`, no server: samples/s.
double ComputeOnly(mlp::Device device, int batch, int steps) {
  auto net = mlp::MlpBackend::Create(device, {784, 256, 128, 10}, batch);
  if (!net.ok()) {
    PP_LOG(Error) << net.status().ToString();
    return 0;
  }
  std::vector<std::vector<float>> p(3), g(3);
  std::vector<const float*> pp;
  std::vector<float*> gp;
  for (int l = 0; l < 3; ++l) {
    p[l].assign((*net)->layer_size(l), 0.01f);
    g[l].resize((*net)->layer_size(l));
    pp.push_back(p[l].data());
    gp.push_back(g[l].data());
  }
  std::vector<float> x(size_t(batch) * 784, 0.5f);
  std::vector<uint8_t> y(batch, 3);
  float loss;
  (*net)->ForwardBackward(pp, x.data(), y.data(), batch, gp, &loss).IgnoreError();  // warm-up
  int64_t t0 = NowUs();
  for (int s = 0; s < steps; ++s) {
    Status st = (*net)->ForwardBackward(pp, x.data(), y.data(), batch, gp, &loss);
    if (!st.ok()) {
      PP_LOG(Error) << st.ToString();
      return 0;
    }
  }
  return double(steps) * batch / ((NowUs() - t0) * 1e-6);
}

// fmnist_mlp on `device` ("cpu" or "gpu" in the case names): one epoch over (a part of) the
// training set with 1 and 2 workers, against the backend's own compute rate.
void FmnistFigures(Reporter& rep, const Options& opt, mlp::Device device, const AppOptions& app) {
  const bool gpu = device == mlp::Device::kGpu;
  const std::string tag = gpu ? "fmnist_mlp_gpu" : "fmnist_mlp";
  FmnistOptions fo;
  fo.device = device;
  fo.test_limit = 1000;
  fo.train_limit = opt.quick ? 6000 : 30000;
  RunRate fm[3];
  for (int w : {1, 2}) {
    fm[w] = Throughput(w, [&](Client& c, AppResult* r) { return RunFmnistMlp(c, app, fo, r); });
  }
  const double compute = ComputeOnly(device, app.batch, opt.quick ? 50 : 400);
  const std::string backend = gpu ? "GPU backend (cuBLAS)" : "CPU backend (Eigen)";
  rep.Add({"apps", tag + "_compute_only/1w", "samples/s", compute, 0,
           backend + " forward+backward, batch " + std::to_string(app.batch) + ", no parameter server"});
  rep.Add({"apps", tag + "/2s1w", "samples/s", fm[1].samples_per_s, compute,
           "ssp:2, batch " + std::to_string(app.batch) +
               ", Adam; baseline: compute alone (ratio = share of compute speed kept)"});
  rep.Add(
      {"apps", tag + "/2s2w", "samples/s", fm[2].samples_per_s, fm[1].samples_per_s, "aggregate; baseline: 1 worker"});
  for (int w : {1, 2}) {
    rep.Add({"apps", tag + "_network_wait/2s" + std::to_string(w) + "w", "fraction", fm[w].wait_fraction, 0,
             "share of step time (pull + forward/backward) spent in the pull, mean over workers"});
  }
}

void AppsBench(Reporter& rep, const Options& opt) {
  SetLogLevel(LogLevel::kWarning);
  AppOptions app;
  app.epochs = 1;
  app.batch = 64;
  app.progress_interval_s = 0;
  app.consistency = {Consistency::kSsp, 2};
  FmnistFigures(rep, opt, mlp::Device::kCpu, app);
  if (mlp::GpuAvailable()) FmnistFigures(rep, opt, mlp::Device::kGpu, app);

  // sparse_lr: streamed examples, sparse push/pull of the rows a minibatch touches.
  const int64_t ex = opt.quick ? 100000 : 600000;
  SparseLrOptions so;
  so.heldout = 2000;
  AppOptions sapp = app;
  sapp.batch = 1000;
  double sl[3] = {0, 0, 0};
  for (int w : {1, 2}) {
    so.examples_total = ex;
    sl[w] = Throughput(w, [&](Client& c, AppResult* r) { return RunSparseLr(c, sapp, so, r); }).samples_per_s;
  }
  rep.Add({"apps", "sparse_lr/2s1w", "samples/s", sl[1], 0, "ssp:2, batch 1000, FTRL, 41 ids per example"});
  rep.Add({"apps", "sparse_lr/2s2w", "samples/s", sl[2], sl[1], "aggregate; baseline: 1 worker"});

  // linreg: dense, tiny model; shows per-clock overhead.
  LinregOptions lo;
  lo.examples_per_worker = opt.quick ? 5000 : 20000;
  AppOptions lapp = app;
  lapp.batch = 100;
  lapp.epochs = 2;
  double lr[3] = {0, 0, 0};
  for (int w : {1, 2})
    lr[w] = Throughput(w, [&](Client& c, AppResult* r) { return RunLinreg(c, lapp, lo, r); }).samples_per_s;
  rep.Add({"apps", "linreg/2s1w", "samples/s", lr[1], 0, "ssp:2, batch 100, 100 features: one clock per 100 samples"});
  rep.Add({"apps", "linreg/2s2w", "samples/s", lr[2], lr[1], "aggregate; baseline: 1 worker"});
  SetLogLevel(LogLevel::kInfo);
}

PP_BENCH(apps, AppsBench);

}  // namespace
}  // namespace pushpull::bench
