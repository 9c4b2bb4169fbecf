// Optimizer configs (optimizers/optimizer.h): names round-trip, validation refuses each bad field
// by name, equality is field-wise, and slots are named, counted and initialised.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

using test_util::kInf;
using test_util::kNaN;
using test_util::Mutator;

TEST(OptimizerConfig, KindRoundTrip) {
  for (Kind k : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kAdaGrad, Kind::kFtrl}) {
    Result<Kind> r = ParseKind(KindName(k));
    ASSERT_TRUE(r.ok()) << KindName(k);
    EXPECT_EQ(*r, k);
  }
  EXPECT_STREQ(KindName(Kind::kAdamW), "adamw");
  EXPECT_EQ(*ParseKind("Adam"), Kind::kAdam);
  Result<Kind> bad = ParseKind("rmsprop");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("rmsprop"), std::string::npos);
}

TEST(OptimizerConfig, ScheduleKind) {
  EXPECT_EQ(*ParseScheduleKind("constant"), ScheduleKind::kConstant);
  EXPECT_EQ(*ParseScheduleKind("step"), ScheduleKind::kStep);
  EXPECT_EQ(*ParseScheduleKind("cosine"), ScheduleKind::kCosine);
  EXPECT_FALSE(ParseScheduleKind("linear").ok());
  EXPECT_FALSE(ParseScheduleKind("").ok());
}

struct BadCase {
  const char* field;  // the name the message must carry
  Mutator mutate;
};

std::vector<BadCase> BadCases() {
  return {
      {"optimizer.kind", [](OptimizerConfig& c) { c.kind = static_cast<Kind>(9); }},
      {"optimizer.lr", [](OptimizerConfig& c) { c.lr = -0.1f; }},
      {"optimizer.lr", [](OptimizerConfig& c) { c.lr = kNaN; }},
      {"optimizer.lr", [](OptimizerConfig& c) { c.lr = kInf; }},
      {"optimizer.momentum", [](OptimizerConfig& c) { c.momentum = 1.0f; }},
      {"optimizer.momentum", [](OptimizerConfig& c) { c.momentum = -0.5f; }},
      {"optimizer.momentum", [](OptimizerConfig& c) { c.momentum = kNaN; }},
      {"optimizer.nesterov", [](OptimizerConfig& c) { c.nesterov = true; }},
      {"optimizer.weight_decay", [](OptimizerConfig& c) { c.weight_decay = -1e-4f; }},
      {"optimizer.weight_decay", [](OptimizerConfig& c) { c.weight_decay = kNaN; }},
      {"optimizer.beta1", [](OptimizerConfig& c) { c.beta1 = 1.5f; }},
      {"optimizer.beta1", [](OptimizerConfig& c) { c.beta1 = kNaN; }},
      {"optimizer.beta2", [](OptimizerConfig& c) { c.beta2 = 1.0f; }},
      {"optimizer.beta2", [](OptimizerConfig& c) { c.beta2 = -0.1f; }},
      {"optimizer.epsilon", [](OptimizerConfig& c) { c.epsilon = 0.0f; }},
      {"optimizer.epsilon", [](OptimizerConfig& c) { c.epsilon = -1e-8f; }},
      {"optimizer.epsilon", [](OptimizerConfig& c) { c.epsilon = kNaN; }},
      {"optimizer.initial_accumulator", [](OptimizerConfig& c) { c.initial_accumulator = -1; }},
      {"optimizer.ftrl_alpha", [](OptimizerConfig& c) { c.ftrl_alpha = 0.0f; }},
      {"optimizer.ftrl_beta", [](OptimizerConfig& c) { c.ftrl_beta = -1.0f; }},
      {"optimizer.ftrl_l1", [](OptimizerConfig& c) { c.ftrl_l1 = -1.0f; }},
      {"optimizer.ftrl_l2", [](OptimizerConfig& c) { c.ftrl_l2 = kNaN; }},
      {"optimizer.clip_norm", [](OptimizerConfig& c) { c.clip_norm = -1.0f; }},
      {"optimizer.clip_norm", [](OptimizerConfig& c) { c.clip_norm = kInf; }},
      {"optimizer.schedule.kind", [](OptimizerConfig& c) { c.schedule.kind = static_cast<ScheduleKind>(7); }},
      {"optimizer.schedule.warmup_steps", [](OptimizerConfig& c) { c.schedule.warmup_steps = -1; }},
      {"optimizer.schedule.step_size", [](OptimizerConfig& c) { c.schedule.step_size = 0; }},
      {"optimizer.schedule.gamma", [](OptimizerConfig& c) { c.schedule.gamma = 0.0f; }},
      {"optimizer.schedule.gamma", [](OptimizerConfig& c) { c.schedule.gamma = 1.5f; }},
      {"optimizer.schedule.total_steps", [](OptimizerConfig& c) { c.schedule.kind = ScheduleKind::kCosine; }},
      {"optimizer.schedule.total_steps", [](OptimizerConfig& c) { c.schedule.total_steps = -5; }},
      {"optimizer.schedule.min_lr_ratio", [](OptimizerConfig& c) { c.schedule.min_lr_ratio = 2; }},
      {"optimizer.schedule.min_lr_ratio", [](OptimizerConfig& c) { c.schedule.min_lr_ratio = kNaN; }},
  };
}

// FTRL's step is ftrl_alpha's, per coordinate: a learning-rate schedule or staleness_aware would
// do nothing, so they are refused rather than silently ignored.
TEST(OptimizerConfig, FtrlRefusesWhatItWouldIgnore) {
  OptimizerConfig c;
  c.kind = Kind::kFtrl;
  ASSERT_TRUE(Validate(c).ok());
  for (const Mutator& m : std::vector<Mutator>{[](OptimizerConfig& x) { x.staleness_aware = true; },
                                               [](OptimizerConfig& x) {
                                                 x.schedule.kind = ScheduleKind::kCosine;
                                                 x.schedule.total_steps = 10;
                                               },
                                               [](OptimizerConfig& x) { x.schedule.warmup_steps = 5; }}) {
    OptimizerConfig bad = c;
    m(bad);
    Status st = Validate(bad);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("ftrl takes no learning-rate schedule nor staleness_aware"), std::string::npos)
        << st.ToString();
  }
}

TEST(OptimizerConfig, DefaultsAndEdgesAreValid) {
  for (Kind k : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kAdaGrad, Kind::kFtrl}) {
    OptimizerConfig c;
    c.kind = k;
    EXPECT_TRUE(Validate(c).ok()) << KindName(k) << ": " << Validate(c).ToString();
  }
  OptimizerConfig c;
  c.lr = 0.0f;
  c.momentum = 0.9f;
  c.nesterov = true;
  c.beta1 = 0.0f;
  c.schedule.kind = ScheduleKind::kCosine;
  c.schedule.total_steps = 100;
  c.schedule.min_lr_ratio = 1.0f;
  c.schedule.gamma = 1.0f;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
}

TEST(OptimizerConfig, RejectsEachBadFieldByName) {
  for (const BadCase& bc : BadCases()) {
    OptimizerConfig c;
    bc.mutate(c);
    Status st = Validate(c);
    ASSERT_FALSE(st.ok()) << bc.field;
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bc.field;
    EXPECT_EQ(st.message().rfind(std::string(bc.field) + " = ", 0), 0u)
        << "expected the message to start with '" << bc.field << " = ', got: " << st.message();
  }
}

TEST(OptimizerConfig, MessageFormat) {
  OptimizerConfig c;
  c.beta1 = 1.5f;
  EXPECT_EQ(Validate(c).message(), "optimizer.beta1 = 1.5 must be in [0, 1)");
  c = OptimizerConfig();
  c.lr = -1.0f;
  EXPECT_EQ(Validate(c).message(), "optimizer.lr = -1 must be finite and >= 0");
  c = OptimizerConfig();
  c.nesterov = true;
  EXPECT_EQ(Validate(c).message(), "optimizer.nesterov = true requires optimizer.momentum > 0");
}

TEST(OptimizerConfig, FieldWise) {
  const OptimizerConfig base;
  EXPECT_TRUE(base == OptimizerConfig());
  EXPECT_FALSE(base != OptimizerConfig());
  std::vector<Mutator> changes = {
      [](OptimizerConfig& c) { c.kind = Kind::kAdam; },
      [](OptimizerConfig& c) { c.lr = 0.5f; },
      [](OptimizerConfig& c) { c.momentum = 0.5f; },
      [](OptimizerConfig& c) { c.nesterov = true; },
      [](OptimizerConfig& c) { c.weight_decay = 0.5f; },
      [](OptimizerConfig& c) { c.beta1 = 0.5f; },
      [](OptimizerConfig& c) { c.beta2 = 0.5f; },
      [](OptimizerConfig& c) { c.epsilon = 0.5f; },
      [](OptimizerConfig& c) { c.amsgrad = true; },
      [](OptimizerConfig& c) { c.initial_accumulator = 0.5f; },
      [](OptimizerConfig& c) { c.ftrl_alpha = 0.5f; },
      [](OptimizerConfig& c) { c.ftrl_beta = 0.5f; },
      [](OptimizerConfig& c) { c.ftrl_l1 = 0.5f; },
      [](OptimizerConfig& c) { c.ftrl_l2 = 0.5f; },
      [](OptimizerConfig& c) { c.clip_norm = 0.5f; },
      [](OptimizerConfig& c) { c.staleness_aware = true; },
      [](OptimizerConfig& c) { c.schedule.kind = ScheduleKind::kStep; },
      [](OptimizerConfig& c) { c.schedule.warmup_steps = 5; },
      [](OptimizerConfig& c) { c.schedule.step_size = 5; },
      [](OptimizerConfig& c) { c.schedule.gamma = 0.5f; },
      [](OptimizerConfig& c) { c.schedule.total_steps = 5; },
      [](OptimizerConfig& c) { c.schedule.min_lr_ratio = 0.5f; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    OptimizerConfig c;
    changes[i](c);
    EXPECT_TRUE(c != base) << "change " << i;
    EXPECT_FALSE(c == base) << "change " << i;
    OptimizerConfig copy = c;
    EXPECT_TRUE(copy == c) << "change " << i;
  }
  ScheduleConfig s;
  s.gamma = 0.2f;
  EXPECT_FALSE(s == ScheduleConfig());
}

TEST(OptimizerConfig, NamesCountsAndInit) {
  OptimizerConfig c;
  auto sgd = Optimizer::Create(c);
  EXPECT_EQ(sgd->kind(), Kind::kSgd);
  EXPECT_EQ(sgd->num_slots(), 0);
  c.momentum = 0.9f;
  auto sgdm = Optimizer::Create(c);
  ASSERT_EQ(sgdm->num_slots(), 1);
  EXPECT_STREQ(sgdm->slot_name(0), "momentum");

  c = OptimizerConfig();
  c.kind = Kind::kAdam;
  auto adam = Optimizer::Create(c);
  EXPECT_EQ(adam->kind(), Kind::kAdam);
  ASSERT_EQ(adam->num_slots(), 2);
  EXPECT_STREQ(adam->slot_name(0), "m");
  EXPECT_STREQ(adam->slot_name(1), "v");
  c.kind = Kind::kAdamW;
  c.amsgrad = true;
  auto ams = Optimizer::Create(c);
  EXPECT_EQ(ams->kind(), Kind::kAdamW);
  ASSERT_EQ(ams->num_slots(), 3);
  EXPECT_STREQ(ams->slot_name(2), "vmax");
  EXPECT_FLOAT_EQ(ams->slot_init(2), 0.0f);

  c = OptimizerConfig();
  c.kind = Kind::kAdaGrad;
  c.initial_accumulator = 0.25f;
  auto ada = Optimizer::Create(c);
  ASSERT_EQ(ada->num_slots(), 1);
  EXPECT_STREQ(ada->slot_name(0), "accum");
  EXPECT_EQ(ada->slot_init(0), 0.25f);

  c = OptimizerConfig();
  c.kind = Kind::kFtrl;
  auto ftrl = Optimizer::Create(c);
  ASSERT_EQ(ftrl->num_slots(), 2);
  EXPECT_STREQ(ftrl->slot_name(0), "z");
  EXPECT_STREQ(ftrl->slot_name(1), "n");
}

}  // namespace
}  // namespace pushpull::opt
