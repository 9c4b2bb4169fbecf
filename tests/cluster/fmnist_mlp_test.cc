// The Fashion-MNIST MLP app (apps/fmnist_mlp.h) on in-process clusters: it learns on a subset, on
// the CPU and the GPU backend, writes its metrics, and says clearly when its data is missing or
// short.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "apps/fmnist_mlp.h"
#include "apps/mlp/backend.h"
#include "tests/support/local_cluster.h"
#include "tests/support/run_app.h"
#include "tests/support/temp_dir.h"

namespace pushpull {
namespace {

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
  o.device = mlp::Device::kCpu;
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
    for (const char* k :
         {"\"epoch\"", "\"clock\"", "\"wall_s\"", "\"train_loss\"", "\"test_accuracy\"", "\"samples_per_s\""})
      EXPECT_NE(line.find(k), std::string::npos) << line;
    with_acc += line.find("\"test_accuracy\": null") == std::string::npos;
  }
  EXPECT_EQ(lines, 4);     // 2 workers x 2 epochs
  EXPECT_EQ(with_acc, 2);  // worker 0 evaluates
}

// The same small run with GPU workers (cuBLAS backend), two sharing one GPU: it learns as on the
// CPU, and the summary names the backend that ran.
TEST(FmnistMlp, LearnsOnTheGpuBackend) {
  if (!mlp::GpuAvailable()) GTEST_SKIP() << "no usable CUDA device: fmnist_mlp on the GPU not checked";
  AppOptions app;
  app.consistency = {Consistency::kBsp, 0};
  app.epochs = 2;
  app.batch = 64;
  app.progress_interval_s = 0;
  app.target = 0.7;
  FmnistOptions o;
  o.device = mlp::Device::kGpu;
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

// Fewer training images than workers: said as such, not as a failure further on (a cosine
// schedule of length 0).
TEST(FmnistMlp, TooFewImagesForItsWorkersIsAClearError) {
  if (!std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
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

}  // namespace
}  // namespace pushpull
