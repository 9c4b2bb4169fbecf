// Learning-rate schedules (optimizers/optimizer.h): constant, linear warmup, step decay and cosine,
// step by step.
#include <gtest/gtest.h>

#include <cmath>

#include "optimizers/optimizer.h"

namespace pushpull::opt {
namespace {

TEST(Schedule, Constant) {
  OptimizerConfig c;
  c.lr = 0.1f;
  EXPECT_EQ(ScheduledLr(c, 0), 0.1f);
  EXPECT_EQ(ScheduledLr(c, 123456789), 0.1f);
}

TEST(Schedule, LinearWarmup) {
  OptimizerConfig c;
  c.lr = 0.1f;
  c.schedule.warmup_steps = 4;
  EXPECT_FLOAT_EQ(ScheduledLr(c, 0), 0.025f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 1), 0.05f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 2), 0.075f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 3), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 4), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 1000), 0.1f);
}

TEST(Schedule, StepDecay) {
  OptimizerConfig c;
  c.lr = 0.1f;
  c.schedule.kind = ScheduleKind::kStep;
  c.schedule.step_size = 10;
  c.schedule.gamma = 0.5f;
  EXPECT_FLOAT_EQ(ScheduledLr(c, 0), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 9), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 10), 0.05f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 19), 0.05f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 25), 0.025f);
  // With warm-up the decay counts from the end of the warm-up.
  c.schedule.warmup_steps = 5;
  EXPECT_FLOAT_EQ(ScheduledLr(c, 0), 0.02f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 5), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 14), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 15), 0.05f);
}

TEST(Schedule, Cosine) {
  OptimizerConfig c;
  c.lr = 0.1f;
  c.schedule.kind = ScheduleKind::kCosine;
  c.schedule.total_steps = 100;
  EXPECT_FLOAT_EQ(ScheduledLr(c, 0), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 25), float(0.1 * (1 + std::cos(M_PI / 4)) / 2));
  EXPECT_FLOAT_EQ(ScheduledLr(c, 50), 0.05f);
  EXPECT_NEAR(ScheduledLr(c, 100), 0.0f, 1e-9);
  EXPECT_NEAR(ScheduledLr(c, 500), 0.0f, 1e-9);

  c.schedule.warmup_steps = 10;
  c.schedule.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(ScheduledLr(c, 0), 0.01f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 9), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 10), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 60), 0.1f * (0.1f + 0.9f * 0.5f));
  EXPECT_FLOAT_EQ(ScheduledLr(c, 110), 0.01f);
  EXPECT_FLOAT_EQ(ScheduledLr(c, 10000), 0.01f);
}

}  // namespace
}  // namespace pushpull::opt
