// Per-app training throughput on the CPU backend, 1 and 2 workers against 2 servers (threads in
// this process over tcp loopback). Baselines measured in the same run: for 2 workers, the
// 1-worker figure (scaling); for fmnist_mlp, the backend's own compute rate with no parameter
// server at all (what the network and synchronisation cost).
#include <memory>
#include <vector>

#include "apps/fmnist_mlp.h"
#include "apps/linreg.h"
#include "apps/sparse_lr.h"
#include "common/log.h"
#include "common/time.h"
#include "apps/bench/bench.h"
#include "deploy/local_cluster.h"
#include "worker/mlp_backend.h"

namespace pushpull::bench {
namespace {

// Runs `app` on a 2-server cluster with `workers` workers; returns the aggregate of the
// workers' training throughput as the apps measure it (data loading and setup excluded).
double Throughput(int workers, const std::function<Status(Client&, AppResult*)>& app) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = workers;
  cfg.heartbeat_timeout_ms = 10000;
  LocalCluster cluster(cfg);
  if (!cluster.Start().ok()) return 0;
  bool ok = true;
  std::vector<double> rate(workers, 0);
  cluster.RunWorkers([&](Client& c, int w) {
    AppResult r;
    Status st = app(c, &r);
    if (!st.ok()) {
      PP_LOG(Error) << st.ToString();
      ok = false;
    }
    rate[w] = r.samples_per_s;
  });
  cluster.FinishAndJoin().IgnoreError();
  double total = 0;
  for (double r : rate) total += r;
  return ok ? total : 0;
}

void AppsBench(Reporter& rep, const Options& opt) {
  SetLogLevel(LogLevel::kWarning);
  // fmnist_mlp: one epoch over (a part of) the training set.
  const int fm_images = opt.quick ? 6000 : 30000;
  AppOptions app;
  app.epochs = 1;
  app.batch = 64;
  app.progress_interval_s = 0;
  app.consistency = {Consistency::kSsp, 2};
  FmnistOptions fo;
  fo.device = Device::kCpu;
  fo.test_limit = 1000;
  double fm[3] = {0, 0, 0};
  for (int w : {1, 2}) {
    fo.train_limit = fm_images;
    fm[w] = Throughput(w, [&](Client& c, AppResult* r) { return RunFmnistMlp(c, app, fo, r); });
  }
  // The same model's compute alone: forward+backward on batches of 64, no server.
  double compute = 0;
  {
    auto net = MlpBackend::Create(Device::kCpu, {784, 256, 128, 10}, 64);
    if (net.ok()) {
      std::vector<std::vector<float>> p(3), g(3);
      std::vector<const float*> pp;
      std::vector<float*> gp;
      for (int l = 0; l < 3; ++l) {
        p[l].assign((*net)->layer_size(l), 0.01f);
        g[l].resize((*net)->layer_size(l));
        pp.push_back(p[l].data());
        gp.push_back(g[l].data());
      }
      std::vector<float> x(64 * 784, 0.5f);
      std::vector<uint8_t> y(64, 3);
      float loss;
      int steps = opt.quick ? 50 : 400;
      int64_t t0 = NowUs();
      for (int s = 0; s < steps; ++s) (*net)->ForwardBackward(pp, x.data(), y.data(), 64, gp, &loss).IgnoreError();
      compute = steps * 64 / ((NowUs() - t0) * 1e-6);
    }
  }
  rep.Add({"apps", "fmnist_mlp_compute_only/1w", "samples/s", compute, 0,
           "CPU backend forward+backward, batch 64, no parameter server"});
  rep.Add({"apps", "fmnist_mlp/2s1w", "samples/s", fm[1], compute,
           "ssp:2, batch 64, Adam; baseline: compute alone (ratio = share of compute speed kept)"});
  rep.Add({"apps", "fmnist_mlp/2s2w", "samples/s", fm[2], fm[1], "aggregate; baseline: 1 worker (2 cores shared by all)"});

  // sparse_lr: streamed examples, sparse push/pull of the rows a minibatch touches.
  const int64_t ex = opt.quick ? 100000 : 600000;
  SparseLrOptions so;
  so.heldout = 2000;
  AppOptions sapp = app;
  sapp.batch = 1000;
  double sl[3] = {0, 0, 0};
  for (int w : {1, 2}) {
    so.examples_total = ex;
    sl[w] = Throughput(w, [&](Client& c, AppResult* r) { return RunSparseLr(c, sapp, so, r); });
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
    lr[w] = Throughput(w, [&](Client& c, AppResult* r) { return RunLinreg(c, lapp, lo, r); });
  rep.Add({"apps", "linreg/2s1w", "samples/s", lr[1], 0, "ssp:2, batch 100, 100 features: one clock per 100 samples"});
  rep.Add({"apps", "linreg/2s2w", "samples/s", lr[2], lr[1], "aggregate; baseline: 1 worker"});
  SetLogLevel(LogLevel::kInfo);
}

PP_BENCH(apps, AppsBench);

}  // namespace
}  // namespace pushpull::bench
