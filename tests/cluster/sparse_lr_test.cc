// The sparse logistic-regression app (apps/sparse_lr.h) on an in-process cluster: it approaches the
// optimum and reports AUC.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "apps/sparse_lr.h"
#include "tests/support/run_app.h"
#include "tests/support/temp_dir.h"

namespace pushpull {
namespace {

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

// A gap to the optimum the run does not close: worker 0, which evaluates, has the verdict it tells
// the job; worker 1, which does not, has none.
TEST(SparseLr, AMissedTargetSaysWhatItMissedBy) {
  AppOptions app;
  app.epochs = 1;
  app.batch = 500;
  app.progress_interval_s = 0;
  app.target = 1e-9;
  SparseLrOptions o;
  o.examples_total = 20000;
  o.heldout = 2000;
  auto results = RunOnCluster(1, 2, [&](Client& c, AppResult* r) { return RunSparseLr(c, app, o, r); });
  EXPECT_FALSE(results[0].reached_target) << results[0].summary;
  EXPECT_EQ(results[0].missed_target.rfind("missed target: gap ", 0), 0u) << results[0].missed_target;
  EXPECT_NE(results[0].missed_target.find("% > 0.00% (--target)"), std::string::npos) << results[0].missed_target;
  EXPECT_TRUE(results[1].reached_target);
  EXPECT_EQ(results[1].missed_target, "");
}

}  // namespace
}  // namespace pushpull
