// The training apps on in-process clusters: they learn (small runs), report what they promise,
// and fail loudly when told to reach what they cannot.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "apps/fmnist_mlp.h"
#include "apps/linreg.h"
#include "apps/sparse_lr.h"
#include "tests/support/local_cluster.h"

namespace pushpull {
namespace {

std::vector<AppResult> RunOnCluster(int servers, int workers,
                                    const std::function<Status(Client&, AppResult*)>& app) {
  LocalClusterConfig cfg;
  cfg.servers = servers;
  cfg.workers = workers;
  LocalCluster cluster(cfg);
  EXPECT_TRUE(cluster.Start().ok());
  std::vector<AppResult> results(workers);
  cluster.RunWorkers([&](Client& c, int w) {
    Status st = app(c, &results[w]);
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  return results;
}

// --straggler and --slowdown take RANK:VALUE lists; anything else is refused naming the item
// ("x:50" once meant rank 0 and "1abc:50" rank 1: the rank's digits were not checked).
TEST(Injection, RankMapsAreParsedWhole) {
  std::map<int, double> m;
  ASSERT_TRUE(InjectionOptions::ParseRankMap("straggler", "1:50,3:2.5", &m).ok());
  EXPECT_EQ(m, (std::map<int, double>{{1, 50.0}, {3, 2.5}}));
  for (const char* bad : {"x:50", "1abc:50", ":50", "1:", "1:5x", "-1:5", "1:-5", "150", " 1:50", "+1:50",
                          "4294967296:50", "1:inf", "1:1e999"}) {
    std::map<int, double> b;
    Status st = InjectionOptions::ParseRankMap("straggler", bad, &b);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("is not RANK:VALUE"), std::string::npos) << bad << ": " << st.ToString();
  }
}

TEST(Linreg, ConvergesToTheNoiseFloorUnderEveryModel) {
  for (const char* model : {"bsp", "ssp:2", "asp"}) {
    AppOptions app;
    app.consistency = *ParseConsistency(model);
    app.epochs = 5;
    app.progress_interval_s = 0;
    LinregOptions o;
    o.examples_per_worker = 4000;
    auto results = RunOnCluster(2, 2, [&](Client& c, AppResult* r) { return RunLinreg(c, app, o, r); });
    for (auto& r : results) {
      EXPECT_TRUE(r.reached_target) << model << ": " << r.summary;
      EXPECT_LT(r.final_metric, 0.0075) << model;
      EXPECT_LE(r.max_staleness, app.consistency.bound() < 0 ? 1 << 30 : app.consistency.bound());
    }
  }
}

// Without label noise the loss floor is 0, which float arithmetic never quite reaches: the default
// target is then 1e-6, not 0 (found in review: a run that converged to 7e-12 reported reached=NO
// and its worker exited 3).
TEST(Linreg, WithoutNoiseItReachesItsDefaultTarget) {
  AppOptions app;
  app.epochs = 5;
  app.progress_interval_s = 0;
  LinregOptions o;
  o.examples_per_worker = 4000;
  o.noise = 0;
  auto results = RunOnCluster(1, 1, [&](Client& c, AppResult* r) { return RunLinreg(c, app, o, r); });
  EXPECT_TRUE(results[0].reached_target) << results[0].summary;
  EXPECT_LT(results[0].final_metric, 1e-6);
}

// An output file the app cannot open fails it at once, naming the flag, before it trains (the
// worker then exits 2: not restarted), rather than at its first epoch's end.
TEST(Linreg, AnOutputFileItCannotOpenFailsItBeforeTraining) {
  for (const char* flag : {"--trace_out", "--metrics_out"}) {
    LocalClusterConfig cfg;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    AppOptions app;
    app.progress_interval_s = 0;
    (std::string(flag) == "--trace_out" ? app.trace_out : app.metrics_out) = "/nonexistent/dir/out";
    LinregOptions o;
    AppResult r;
    Status st = RunLinreg(cluster.client(0), app, o, &r);
    EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
    EXPECT_NE(st.message().find(flag), std::string::npos) << st.ToString();
    EXPECT_EQ(cluster.client(0).clock(), 0) << flag << ": trained before failing";
    cluster.FinishAndJoin().IgnoreError();
  }
}

TEST(FmnistMlp, LearnsOnASubsetAndWritesMetrics) {
  std::string metrics = ::testing::TempDir() + "/fmnist_metrics.jsonl";
  std::remove(metrics.c_str());
  AppOptions app;
  app.consistency = {Consistency::kSsp, 1};
  app.epochs = 2;
  app.batch = 64;
  app.progress_interval_s = 0;
  app.metrics_out = metrics;
  app.target = 0.7;
  FmnistOptions o;
  o.device = Device::kCpu;
  o.train_limit = 6000;
  o.test_limit = 2000;
  auto results = RunOnCluster(2, 2, [&](Client& c, AppResult* r) { return RunFmnistMlp(c, app, o, r); });
  EXPECT_TRUE(results[0].reached_target) << results[0].summary;
  EXPECT_GT(results[0].final_metric, 0.7);
  for (const AppResult& r : results) {  // pulls took some of the step time, not all of it
    EXPECT_GT(r.wait_fraction, 0) << r.summary;
    EXPECT_LT(r.wait_fraction, 1) << r.summary;
  }
  std::ifstream f(metrics);
  std::string line;
  int lines = 0, with_acc = 0;
  while (std::getline(f, line)) {
    ++lines;
    for (const char* k : {"\"epoch\"", "\"clock\"", "\"wall_s\"", "\"train_loss\"", "\"test_accuracy\"", "\"samples_per_s\""})
      EXPECT_NE(line.find(k), std::string::npos) << line;
    with_acc += line.find("\"test_accuracy\": null") == std::string::npos;
  }
  EXPECT_EQ(lines, 4);     // 2 workers x 2 epochs
  EXPECT_EQ(with_acc, 2);  // worker 0 evaluates
}

// The same small run with GPU workers (cuBLAS backend), two sharing one GPU: it learns as on the
// CPU, and the summary names the backend that ran.
TEST(FmnistMlp, LearnsOnTheGpuBackend) {
  if (!GpuAvailable()) GTEST_SKIP() << "no usable CUDA device: fmnist_mlp on the GPU not checked";
  AppOptions app;
  app.consistency = {Consistency::kBsp, 0};
  app.epochs = 2;
  app.batch = 64;
  app.progress_interval_s = 0;
  app.target = 0.7;
  FmnistOptions o;
  o.device = Device::kGpu;
  o.train_limit = 6000;
  o.test_limit = 2000;
  auto results = RunOnCluster(2, 2, [&](Client& c, AppResult* r) { return RunFmnistMlp(c, app, o, r); });
  EXPECT_TRUE(results[0].reached_target) << results[0].summary;
  EXPECT_GT(results[0].final_metric, 0.7);
  for (const AppResult& r : results) {
    EXPECT_NE(r.summary.find("backend=gpu (cuBLAS, "), std::string::npos) << r.summary;
    EXPECT_GT(r.samples_per_s, 0);
    EXPECT_GT(r.wait_fraction, 0);
    EXPECT_LT(r.wait_fraction, 1);
  }
}

TEST(FmnistMlp, MissingDataIsAClearError) {
  AppOptions app;
  app.epochs = 1;
  FmnistOptions o;
  o.data_dir = "/nonexistent/fmnist";
  LocalClusterConfig cfg;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  AppResult r;
  Status st = RunFmnistMlp(cluster.client(0), app, o, &r);
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("/nonexistent/fmnist"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("--data_dir"), std::string::npos) << st.ToString();
}

// Fewer training images than workers: said as such (found in review: it failed on the cosine
// schedule's length of 0).
TEST(FmnistMlp, TooFewImagesForItsWorkersIsAClearError) {
  if (!std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  AppOptions app;
  app.epochs = 1;
  FmnistOptions o;
  o.data_dir = "/usr/share/datasets/fashion-mnist";
  o.train_limit = 1;
  LocalClusterConfig cfg;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.RunWorkers([&](Client& c, int) {
    AppResult r;
    Status st = RunFmnistMlp(c, app, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("1 training images for 2 workers: each needs one at least"), std::string::npos)
        << st.ToString();
  });
  cluster.FinishAndJoin().IgnoreError();
}

TEST(SparseLr, ApproachesTheOptimumAndReportsAuc) {
  std::string metrics = ::testing::TempDir() + "/sparse_metrics.jsonl";
  std::remove(metrics.c_str());
  AppOptions app;
  app.consistency = {Consistency::kBsp, 0};
  app.epochs = 2;
  app.batch = 1000;
  app.progress_interval_s = 0;
  app.metrics_out = metrics;
  app.target = 0.15;  // a small run gets within 15% of the optimum
  SparseLrOptions o;
  o.examples_total = 400000;
  o.heldout = 20000;
  auto results = RunOnCluster(2, 2, [&](Client& c, AppResult* r) { return RunSparseLr(c, app, o, r); });
  EXPECT_TRUE(results[0].reached_target) << results[0].summary;
  std::ifstream f(metrics);
  std::string line;
  int with_auc = 0;
  while (std::getline(f, line))
    if (line.find("\"auc\": null") == std::string::npos && line.find("\"optimal_logloss\"") != std::string::npos)
      ++with_auc;
  EXPECT_EQ(with_auc, 2);
}

}  // namespace
}  // namespace pushpull
