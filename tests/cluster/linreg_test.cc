// The linear-regression app (apps/linreg.h) on in-process clusters: it converges under every
// consistency model, reaches its default target without noise, says what it missed a target by,
// logs its epochs at a rate, and fails before training on an output file it cannot open.
#include <gtest/gtest.h>

#include <string>

#include "apps/linreg.h"
#include "tests/support/cluster_test.h"
#include "tests/support/local_cluster.h"
#include "tests/support/run_app.h"

namespace pushpull {
namespace {

class Linreg : public ClusterTest {};

// Every worker reaches the noise floor, its pulls within the model's staleness bound.
TEST_P(Linreg, ConvergesToTheNoiseFloorUnderEveryModel) {
  const std::string model = GetParam().Name();
  AppOptions app;
  app.consistency = GetParam().consistency;
  app.epochs = 5;
  app.progress_interval_s = 0;
  LinregOptions o;
  o.examples_per_worker = 4000;
  auto results = RunOnCluster(*cluster_, [&](Client& c, AppResult* r) { return RunLinreg(c, app, o, r); });
  for (auto& r : results) {
    EXPECT_TRUE(r.reached_target) << model << ": " << r.summary;
    EXPECT_EQ(r.missed_target, "") << model;
    EXPECT_LT(r.final_metric, 0.0075) << model;
    EXPECT_LE(r.max_staleness, app.consistency.bound() < 0 ? 1 << 30 : app.consistency.bound());
  }
}

INSTANTIATE_TEST_SUITE_P(, Linreg, ::testing::ValuesIn(UnderEachModel(2, 2, {"bsp", "ssp:2", "asp"})),
                         ClusterParamsName());

// Without label noise the loss floor is 0, which float arithmetic never quite reaches: the default
// target is then 1e-6, not 0 (with 0, a run that converged to 7e-12 would report reached=NO and
// its worker exit 3).
TEST_F(Linreg, WithoutNoiseItReachesItsDefaultTarget) {
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

// A target the run does not reach: the run itself succeeds, and each worker (each evaluates its
// own loss) has the verdict it tells the job, saying by what it missed and how the target was set.
TEST_F(Linreg, AMissedTargetSaysWhatItMissedBy) {
  AppOptions app;
  app.epochs = 1;
  app.progress_interval_s = 0;
  app.target = 1e-12;
  LinregOptions o;
  o.examples_per_worker = 500;
  auto results = RunOnCluster(1, 2, [&](Client& c, AppResult* r) { return RunLinreg(c, app, o, r); });
  for (const AppResult& r : results) {
    EXPECT_FALSE(r.reached_target) << r.summary;
    EXPECT_EQ(r.missed_target.rfind("missed target: loss ", 0), 0u) << r.missed_target;
    EXPECT_NE(r.missed_target.find(" > 1e-12 (--target)"), std::string::npos) << r.missed_target;
  }
  // The default target, 1.5 times the noise floor (0.5 x 0.1^2), missed by a run that barely trains.
  app.target = -1;
  app.lr = 1e-6f;
  results = RunOnCluster(1, 1, [&](Client& c, AppResult* r) { return RunLinreg(c, app, o, r); });
  EXPECT_NE(results[0].missed_target.find(" > 0.0075 (1.5 x noise floor 0.0050)"), std::string::npos)
      << results[0].missed_target;
}

// Epoch lines come at a rate: the first few, then one at most every progress_every_s, and the
// last; every one with progress_every_s 0. (A run of thousands of short epochs would otherwise
// log thousands of lines a minute.)
TEST_F(Linreg, EpochLinesComeAtARate) {
  for (int every_s : {0, 3600}) {
    AppOptions app;
    app.epochs = 12;
    app.progress_interval_s = 0;
    app.progress_every_s = every_s;
    LinregOptions o;
    o.examples_per_worker = 200;
    testing::internal::CaptureStderr();
    RunOnCluster(1, 1, [&](Client& c, AppResult* r) { return RunLinreg(c, app, o, r); });
    const std::string err = testing::internal::GetCapturedStderr();
    int lines = 0;
    for (size_t at = err.find("linreg epoch "); at != std::string::npos; at = err.find("linreg epoch ", at + 1))
      ++lines;
    EXPECT_EQ(lines, every_s == 0 ? 12 : EpochLines::kFirstEpochLines + 1) << every_s << "\n" << err;
    EXPECT_NE(err.find("linreg epoch 12/12 loss "), std::string::npos) << every_s << "\n" << err;
    EXPECT_EQ(err.find("linreg epoch 8/12 ") == std::string::npos, every_s != 0) << every_s << "\n" << err;
  }
}

// An output file the app cannot open fails it at once, naming the flag, before it trains (the
// worker then exits 2: not restarted), rather than at its first epoch's end.
TEST_F(Linreg, AnOutputFileItCannotOpenFailsItBeforeTraining) {
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

}  // namespace
}  // namespace pushpull
