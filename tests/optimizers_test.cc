// Optimizers against reference trajectories computed here, in double, straight from the
// published update rules (scalar loops that share no code with the library).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "optimizers/optimizer.h"

namespace pushpull::opt {
namespace {

// Lengths around the 8-lane vector width: a lone tail, tail only, body + tail, long.
constexpr size_t kLengths[] = {1, 7, 33, 1000};
constexpr int kSteps = 12;
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

std::vector<float> Uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected,
                 const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], kAtol + kRtol * std::fabs(expected[i]))
        << what << "[" << i << "]";
  }
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// The library side: parameters plus slots initialised from slot_init(), as the server keeps them.
struct Table {
  Table(const OptimizerConfig& c, std::vector<float> init) : opt(Optimizer::Create(c)) {
    EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
    param = std::move(init);
    for (int s = 0; s < opt->num_slots(); ++s) {
      slots.emplace_back(param.size(), opt->slot_init(s));
    }
  }
  // Updates elements [begin, begin+n).
  void Apply(const float* grad, size_t begin, size_t n, const StepContext& ctx) {
    std::vector<float*> ptrs;
    for (auto& s : slots) ptrs.push_back(s.data() + begin);
    opt->Apply(param.data() + begin, ptrs.data(), grad, n, ctx);
  }
  void Apply(const std::vector<float>& grad, const StepContext& ctx) {
    Apply(grad.data(), 0, grad.size(), ctx);
  }

  std::unique_ptr<Optimizer> opt;
  std::vector<float> param;
  std::vector<std::vector<float>> slots;
};

// ---- reference update rules, one element at a time, in double ----

struct SgdRef {
  std::vector<double> p, buf;
  void Step(const OptimizerConfig& c, const StepContext& ctx, const std::vector<float>& grad) {
    buf.resize(p.size(), 0.0);
    const double mu = c.momentum, wd = c.weight_decay;
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = double(ctx.grad_scale) * grad[i] + wd * p[i];
      double d = g;
      if (mu > 0) {
        buf[i] = mu * buf[i] + g;
        d = c.nesterov ? g + mu * buf[i] : buf[i];
      }
      p[i] -= double(ctx.lr) * d;
    }
  }
};

struct AdamRef {
  std::vector<double> p, m, v, vmax;
  void Step(const OptimizerConfig& c, const StepContext& ctx, const float* grad, size_t begin,
            size_t n) {
    m.resize(p.size(), 0.0);
    v.resize(p.size(), 0.0);
    vmax.resize(p.size(), 0.0);
    const double b1 = c.beta1, b2 = c.beta2, lr = ctx.lr, wd = c.weight_decay, eps = c.epsilon;
    const double bc1 = 1 - std::pow(b1, double(ctx.step));
    const double bc2 = 1 - std::pow(b2, double(ctx.step));
    const bool adamw = c.kind == Kind::kAdamW;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = begin + k;
      double g = double(ctx.grad_scale) * grad[k];
      if (adamw) {
        p[i] *= 1 - lr * wd;
      } else {
        g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double v_used = c.amsgrad ? vmax[i] : v[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v_used) / std::sqrt(bc2) + eps);
    }
  }
  void Step(const OptimizerConfig& c, const StepContext& ctx, const std::vector<float>& grad) {
    Step(c, ctx, grad.data(), 0, grad.size());
  }
};

struct AdaGradRef {
  std::vector<double> p, acc;
  void Step(const OptimizerConfig& c, const StepContext& ctx, const std::vector<float>& grad) {
    acc.resize(p.size(), c.initial_accumulator);
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = double(ctx.grad_scale) * grad[i] + double(c.weight_decay) * p[i];
      acc[i] += g * g;
      p[i] -= double(ctx.lr) * g / (std::sqrt(acc[i]) + c.epsilon);
    }
  }
};

struct FtrlRef {
  std::vector<double> w, z, n;
  void Step(const OptimizerConfig& c, const StepContext& ctx, const std::vector<float>& grad) {
    z.resize(w.size(), 0.0);
    n.resize(w.size(), 0.0);
    const double alpha = c.ftrl_alpha, beta = c.ftrl_beta, l1 = c.ftrl_l1, l2 = c.ftrl_l2;
    for (size_t i = 0; i < w.size(); ++i) {
      const double g = double(ctx.grad_scale) * grad[i];
      const double sigma = (std::sqrt(n[i] + g * g) - std::sqrt(n[i])) / alpha;
      z[i] += g - sigma * w[i];
      n[i] += g * g;
      if (std::fabs(z[i]) <= l1) {
        w[i] = 0.0;
      } else {
        const double sign = z[i] < 0 ? -1.0 : 1.0;
        w[i] = -(z[i] - sign * l1) / ((beta + std::sqrt(n[i])) / alpha + l2);
      }
    }
  }
};

// Varies lr and grad_scale over the steps, as a schedule and BSP averaging would.
StepContext Ctx(int step, float base_lr = 0.05f) {
  StepContext ctx;
  ctx.step = step;
  ctx.lr = base_lr * (1.0f + 0.1f * float(step % 4));
  ctx.grad_scale = step % 3 == 0 ? 0.5f : 1.0f;
  return ctx;
}

std::vector<float> Grad(size_t n, int step, uint32_t salt = 0) {
  return Uniform(n, 1000u * uint32_t(step) + uint32_t(n) + salt);
}

// ---- names, equality, validation ----

TEST(OptimizerNames, KindRoundTrip) {
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

TEST(OptimizerNames, ScheduleKind) {
  EXPECT_EQ(*ParseScheduleKind("constant"), ScheduleKind::kConstant);
  EXPECT_EQ(*ParseScheduleKind("step"), ScheduleKind::kStep);
  EXPECT_EQ(*ParseScheduleKind("cosine"), ScheduleKind::kCosine);
  EXPECT_FALSE(ParseScheduleKind("linear").ok());
  EXPECT_FALSE(ParseScheduleKind("").ok());
}

using Mutator = std::function<void(OptimizerConfig&)>;
struct BadCase {
  const char* field;  // the name the message must carry
  Mutator mutate;
};

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

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
      {"optimizer.schedule.kind",
       [](OptimizerConfig& c) { c.schedule.kind = static_cast<ScheduleKind>(7); }},
      {"optimizer.schedule.warmup_steps", [](OptimizerConfig& c) { c.schedule.warmup_steps = -1; }},
      {"optimizer.schedule.step_size", [](OptimizerConfig& c) { c.schedule.step_size = 0; }},
      {"optimizer.schedule.gamma", [](OptimizerConfig& c) { c.schedule.gamma = 0.0f; }},
      {"optimizer.schedule.gamma", [](OptimizerConfig& c) { c.schedule.gamma = 1.5f; }},
      {"optimizer.schedule.total_steps",
       [](OptimizerConfig& c) { c.schedule.kind = ScheduleKind::kCosine; }},
      {"optimizer.schedule.total_steps", [](OptimizerConfig& c) { c.schedule.total_steps = -5; }},
      {"optimizer.schedule.min_lr_ratio", [](OptimizerConfig& c) { c.schedule.min_lr_ratio = 2; }},
      {"optimizer.schedule.min_lr_ratio",
       [](OptimizerConfig& c) { c.schedule.min_lr_ratio = kNaN; }},
  };
}

// FTRL's step is ftrl_alpha's, per coordinate: a learning-rate schedule or staleness_aware would
// do nothing, so they are refused rather than silently ignored (found in review).
TEST(OptimizerValidate, FtrlRefusesWhatItWouldIgnore) {
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

TEST(OptimizerValidate, DefaultsAndEdgesAreValid) {
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

TEST(OptimizerValidate, RejectsEachBadFieldByName) {
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

TEST(OptimizerValidate, MessageFormat) {
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

TEST(OptimizerConfigEquality, FieldWise) {
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

// ---- slots ----

TEST(OptimizerSlots, NamesCountsAndInit) {
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

// ---- trajectories ----

struct Variant {
  const char* name;
  Mutator mutate;
};

TEST(SgdTrajectory, MatchesReference) {
  const std::vector<Variant> variants = {
      {"plain", [](OptimizerConfig&) {}},
      {"weight_decay", [](OptimizerConfig& c) { c.weight_decay = 0.1f; }},
      {"momentum", [](OptimizerConfig& c) { c.momentum = 0.9f; }},
      {"nesterov", [](OptimizerConfig& c) { c.momentum = 0.9f, c.nesterov = true; }},
      {"nesterov_wd",
       [](OptimizerConfig& c) { c.momentum = 0.5f, c.nesterov = true, c.weight_decay = 0.01f; }},
  };
  for (const Variant& var : variants) {
    for (size_t n : kLengths) {
      SCOPED_TRACE(std::string(var.name) + " n=" + std::to_string(n));
      OptimizerConfig c;
      var.mutate(c);
      Table t(c, Uniform(n, 7));
      SgdRef ref{ToDouble(t.param), {}};
      for (int step = 1; step <= kSteps; ++step) {
        const std::vector<float> g = Grad(n, step);
        t.Apply(g, Ctx(step));
        ref.Step(c, Ctx(step), g);
      }
      ExpectClose(t.param, ref.p, "param");
      if (c.momentum > 0) ExpectClose(t.slots[0], ref.buf, "momentum");
    }
  }
}

TEST(SgdTrajectory, NesterovDiffersFromMomentum) {
  OptimizerConfig c;
  c.momentum = 0.9f;
  Table heavy(c, Uniform(33, 7));
  c.nesterov = true;
  Table nest(c, Uniform(33, 7));
  for (int step = 1; step <= 3; ++step) {
    heavy.Apply(Grad(33, step), Ctx(step));
    nest.Apply(Grad(33, step), Ctx(step));
  }
  EXPECT_GT(MaxAbsDiff(heavy.param, nest.param), 1e-2);
}

TEST(AdamTrajectory, MatchesReference) {
  const std::vector<Variant> variants = {
      {"adam", [](OptimizerConfig& c) { c.kind = Kind::kAdam; }},
      {"adam_l2", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.weight_decay = 0.1f; }},
      {"adamw", [](OptimizerConfig& c) { c.kind = Kind::kAdamW, c.weight_decay = 0.1f; }},
      {"adam_amsgrad", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.amsgrad = true; }},
      {"adamw_amsgrad",
       [](OptimizerConfig& c) { c.kind = Kind::kAdamW, c.amsgrad = true, c.weight_decay = 0.05f; }},
      {"betas", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.beta1 = 0.5f, c.beta2 = 0.9f; }},
      {"amsgrad_betas",
       [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.amsgrad = true, c.beta2 = 0.9f; }},
  };
  for (const Variant& var : variants) {
    for (size_t n : kLengths) {
      SCOPED_TRACE(std::string(var.name) + " n=" + std::to_string(n));
      OptimizerConfig c;
      var.mutate(c);
      Table t(c, Uniform(n, 11));
      AdamRef ref{ToDouble(t.param), {}, {}, {}};
      for (int step = 1; step <= kSteps; ++step) {
        // Large gradients first, then small ones, so v shrinks and AMSGrad's max matters.
        std::vector<float> g = Grad(n, step);
        if (step > 4) {
          for (float& x : g) x *= 0.01f;
        }
        t.Apply(g, Ctx(step));
        ref.Step(c, Ctx(step), g);
      }
      ExpectClose(t.param, ref.p, "param");
      ExpectClose(t.slots[0], ref.m, "m");
      ExpectClose(t.slots[1], ref.v, "v");
      if (c.amsgrad) ExpectClose(t.slots[2], ref.vmax, "vmax");
    }
  }
}

// Runs kSteps of c on 33 elements with gradients that shrink after step 4.
std::vector<float> RunAdam(const OptimizerConfig& c) {
  Table t(c, Uniform(33, 11));
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<float> g = Grad(33, step);
    if (step > 4) {
      for (float& x : g) x *= 0.01f;
    }
    t.Apply(g, Ctx(step));
  }
  return t.param;
}

TEST(AdamTrajectory, AdamWDecouplesWeightDecay) {
  OptimizerConfig c;
  c.kind = Kind::kAdam;
  c.weight_decay = 0.1f;
  const std::vector<float> adam = RunAdam(c);
  c.kind = Kind::kAdamW;
  const std::vector<float> adamw = RunAdam(c);
  EXPECT_GT(MaxAbsDiff(adam, adamw), 1e-3);
  // Without weight decay the two are the same algorithm, to the bit.
  c.weight_decay = 0.0f;
  const std::vector<float> adamw0 = RunAdam(c);
  c.kind = Kind::kAdam;
  EXPECT_EQ(RunAdam(c), adamw0);
}

TEST(AdamTrajectory, AmsGradChangesTheTrajectory) {
  OptimizerConfig c;
  c.kind = Kind::kAdam;
  c.beta2 = 0.9f;  // v forgets fast, so max(vmax, v) differs from v by a lot
  const std::vector<float> plain = RunAdam(c);
  c.amsgrad = true;
  EXPECT_GT(MaxAbsDiff(plain, RunAdam(c)), 1e-3);
}

// Sparse rows touched at different table steps carry their own step count: row 0 at table
// steps {1, 2, 5}, row 1 at {3}, row 2 at {2, 3, 4, 5}. The server calls Apply once per run of
// rows that share a count; here rows 1 and 2 are adjacent but updated by separate calls.
TEST(AdamTrajectory, PerRowStepsGiveLazyBiasCorrection) {
  constexpr size_t kDim = 7;
  const std::vector<std::vector<int>> touched = {{1, 2, 5}, {3}, {2, 3, 4, 5}};
  OptimizerConfig c;
  c.kind = Kind::kAdam;
  Table t(c, Uniform(3 * kDim, 5));
  AdamRef ref{ToDouble(t.param), {}, {}, {}};
  std::vector<int64_t> row_step(3, 0);
  for (int table_step = 1; table_step <= 5; ++table_step) {
    for (size_t row = 0; row < 3; ++row) {
      const auto& steps = touched[row];
      if (std::find(steps.begin(), steps.end(), table_step) == steps.end()) continue;
      StepContext ctx = Ctx(table_step);
      ctx.step = ++row_step[row];
      const std::vector<float> g = Grad(kDim, table_step, uint32_t(row));
      t.Apply(g.data(), row * kDim, kDim, ctx);
      ref.Step(c, ctx, g.data(), row * kDim, kDim);
    }
  }
  ExpectClose(t.param, ref.p, "param");
  ExpectClose(t.slots[0], ref.m, "m");
  ExpectClose(t.slots[1], ref.v, "v");

  // The test can tell: bias-correcting row 1 with the table's step (3) instead of its own (1)
  // lands far outside the tolerance.
  AdamRef wrong{ToDouble(Uniform(3 * kDim, 5)), {}, {}, {}};
  StepContext ctx = Ctx(3);
  const std::vector<float> g = Grad(kDim, 3, 1);
  wrong.Step(c, ctx, g.data(), kDim, kDim);
  double max_diff = 0;
  for (size_t i = kDim; i < 2 * kDim; ++i) {
    max_diff = std::max(max_diff, std::fabs(wrong.p[i] - ref.p[i]));
  }
  EXPECT_GT(max_diff, 1e-3);
}

TEST(AdaGradTrajectory, MatchesReference) {
  const std::vector<Variant> variants = {
      {"plain", [](OptimizerConfig&) {}},
      {"initial_accumulator", [](OptimizerConfig& c) { c.initial_accumulator = 0.1f; }},
      {"weight_decay",
       [](OptimizerConfig& c) { c.weight_decay = 0.05f, c.initial_accumulator = 0.01f; }},
      {"epsilon", [](OptimizerConfig& c) { c.epsilon = 0.1f; }},
  };
  for (const Variant& var : variants) {
    for (size_t n : kLengths) {
      SCOPED_TRACE(std::string(var.name) + " n=" + std::to_string(n));
      OptimizerConfig c;
      c.kind = Kind::kAdaGrad;
      var.mutate(c);
      Table t(c, Uniform(n, 13));
      AdaGradRef ref{ToDouble(t.param), {}};
      for (int step = 1; step <= kSteps; ++step) {
        const std::vector<float> g = Grad(n, step);
        t.Apply(g, Ctx(step));
        ref.Step(c, Ctx(step), g);
      }
      ExpectClose(t.param, ref.p, "param");
      ExpectClose(t.slots[0], ref.acc, "accum");
    }
  }
}

TEST(FtrlTrajectory, MatchesReferenceWithExactZeros) {
  for (float l1 : {0.0f, 1.0f}) {
    for (size_t n : kLengths) {
      SCOPED_TRACE("l1=" + std::to_string(l1) + " n=" + std::to_string(n));
      OptimizerConfig c;
      c.kind = Kind::kFtrl;
      c.ftrl_alpha = 0.1f;
      c.ftrl_beta = 1.0f;
      c.ftrl_l1 = l1;
      c.ftrl_l2 = 0.1f;
      Table t(c, std::vector<float>(n, 0.0f));
      FtrlRef ref{std::vector<double>(n, 0.0), {}, {}};
      for (int step = 1; step <= kSteps; ++step) {
        const std::vector<float> g = Grad(n, step);
        t.Apply(g, Ctx(step));
        ref.Step(c, Ctx(step), g);
      }
      ExpectClose(t.slots[0], ref.z, "z");
      ExpectClose(t.slots[1], ref.n, "n");
      size_t zeros = 0;
      for (size_t i = 0; i < n; ++i) {
        // Skip a coordinate whose |z| sits on the l1 threshold within float rounding.
        if (l1 > 0 && std::fabs(std::fabs(ref.z[i]) - l1) < 1e-4) continue;
        if (ref.w[i] == 0.0) {
          ++zeros;
          EXPECT_EQ(t.param[i], 0.0f) << "w[" << i << "] must be exactly zero";
        } else {
          EXPECT_NEAR(t.param[i], ref.w[i], kAtol + kRtol * std::fabs(ref.w[i])) << "w[" << i << "]";
          EXPECT_NE(t.param[i], 0.0f);
        }
      }
      if (l1 == 0.0f) {
        EXPECT_EQ(zeros, 0u);
      } else if (n == 1000) {
        // The data must exercise both sides of the threshold for the test to mean anything.
        EXPECT_GT(zeros, 100u);
        EXPECT_LT(zeros, 900u);
      }
    }
  }
}

TEST(FtrlTrajectory, IgnoresContextLr) {
  OptimizerConfig c;
  c.kind = Kind::kFtrl;
  c.ftrl_l1 = 0.1f;
  Table a(c, std::vector<float>(33, 0.0f));
  Table b(c, std::vector<float>(33, 0.0f));
  for (int step = 1; step <= 5; ++step) {
    a.Apply(Grad(33, step), Ctx(step, 0.05f));
    b.Apply(Grad(33, step), Ctx(step, 3.0f));
  }
  EXPECT_EQ(a.param, b.param);
}

// grad_scale = 0.25 is exact in binary, so pre-scaling the gradient gives the same bits.
TEST(OptimizerApply, GradScaleMultipliesTheGradientFirst) {
  for (Kind k : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kAdaGrad, Kind::kFtrl}) {
    SCOPED_TRACE(KindName(k));
    OptimizerConfig c;
    c.kind = k;
    c.momentum = k == Kind::kSgd ? 0.9f : 0.0f;
    c.weight_decay = 0.01f;
    Table scaled(c, Uniform(33, 3));
    Table prescaled(c, Uniform(33, 3));
    for (int step = 1; step <= 4; ++step) {
      StepContext ctx = Ctx(step);
      std::vector<float> g = Grad(33, step);
      ctx.grad_scale = 0.25f;
      scaled.Apply(g, ctx);
      for (float& x : g) x *= 0.25f;
      ctx.grad_scale = 1.0f;
      prescaled.Apply(g, ctx);
    }
    EXPECT_EQ(scaled.param, prescaled.param);
    EXPECT_NE(scaled.param, Uniform(33, 3));
  }
}

TEST(OptimizerApply, EmptySpanIsANoOp) {
  OptimizerConfig c;
  c.kind = Kind::kAdam;
  auto opt = Optimizer::Create(c);
  float* slots[2] = {nullptr, nullptr};
  opt->Apply(nullptr, slots, nullptr, 0, StepContext());
}

// The contract: Apply() is const and may run concurrently on disjoint spans.
TEST(OptimizerApply, ConcurrentDisjointSpansMatchOneCall) {
  OptimizerConfig c;
  c.kind = Kind::kAdam;
  Table whole(c, Uniform(1000, 9));
  Table split(c, Uniform(1000, 9));
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> g = Grad(1000, step);
    whole.Apply(g, Ctx(step));
    std::thread t1([&] { split.Apply(g.data(), 0, 501, Ctx(step)); });
    std::thread t2([&] { split.Apply(g.data() + 501, 501, 499, Ctx(step)); });
    t1.join();
    t2.join();
  }
  EXPECT_EQ(whole.param, split.param);
}

// ---- schedules ----

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

// ---- gradient helpers ----

// Finite gradients of 2^60 or more are refused too: Adam's v (g^2) and the sums of AdaGrad and
// FTRL would be Inf, freezing or poisoning their rows for good (optimizer review).
TEST(GradientHelpers, AllUsableFindsNaNInfAndHugeValuesAnywhere) {
  const float below = std::nextafter(kMaxGradient, 0.0f);
  const float bads[] = {kNaN, kInf, -kInf, kMaxGradient, -kMaxGradient, std::numeric_limits<float>::max()};
  EXPECT_TRUE(AllUsable(nullptr, 0));
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(33), size_t(40), size_t(71), size_t(1000)}) {
    std::vector<float> x = Uniform(n, 1, -1e17f, 1e17f);
    x[0] = below;
    x[n - 1] = -below;
    if (n > 2) x[1] = std::numeric_limits<float>::denorm_min();
    ASSERT_TRUE(AllUsable(x.data(), n)) << n;
    for (size_t pos = 0; pos < n; ++pos) {
      for (float bad : bads) {
        std::vector<float> y = x;
        y[pos] = bad;
        EXPECT_FALSE(AllUsable(y.data(), n)) << "n=" << n << " pos=" << pos << " value=" << bad;
      }
    }
  }
  // Adam's state stays finite at the largest usable gradient.
  OptimizerConfig c;
  c.kind = Kind::kAdam;
  auto adam = Optimizer::Create(c);
  std::vector<float> p(1, 0.0f), m(1, 0.0f), v(1, 0.0f), g(1, below);
  float* slots[] = {m.data(), v.data()};
  StepContext ctx;
  ctx.step = 1;
  adam->Apply(p.data(), slots, g.data(), 1, ctx);
  EXPECT_TRUE(std::isfinite(v[0]) && std::isfinite(p[0])) << v[0] << " " << p[0];
}

TEST(GradientHelpers, SquaredNormAccumulatesInDouble) {
  for (size_t n : kLengths) {
    const std::vector<float> x = Uniform(n, 21);
    double expected = 0;
    for (float v : x) expected += double(v) * double(v);
    EXPECT_NEAR(SquaredNorm(x.data(), n), expected, 1e-12 * expected) << n;
  }
  EXPECT_EQ(SquaredNorm(nullptr, 0), 0.0);
  // A million equal values: float accumulators drift by ~1e-4 relative; double stays ~1e-12.
  const std::vector<float> same(1000003, 0.1f);
  const double e = double(0.1f) * double(0.1f) * double(same.size());
  EXPECT_NEAR(SquaredNorm(same.data(), same.size()), e, 1e-10 * e);
}

TEST(GradientHelpers, ClipByNorm) {
  for (size_t n : kLengths) {
    SCOPED_TRACE(n);
    std::vector<float> x = Uniform(n, 31, -10.0f, 10.0f);
    const std::vector<float> orig = x;
    const double sq = SquaredNorm(x.data(), n);
    const float clip = static_cast<float>(std::sqrt(sq) / 4);
    ClipByNorm(x.data(), n, sq, clip);
    EXPECT_NEAR(std::sqrt(SquaredNorm(x.data(), n)), clip, 1e-5 * clip);
    const double scale = clip / std::sqrt(sq);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(x[i], orig[i] * scale, 1e-6 * std::fabs(orig[i])) << i;
    }
    // Below the threshold, or with clipping off, nothing changes.
    std::vector<float> y = orig;
    ClipByNorm(y.data(), n, sq, static_cast<float>(std::sqrt(sq) * 2));
    EXPECT_EQ(y, orig);
    ClipByNorm(y.data(), n, sq, 0.0f);
    EXPECT_EQ(y, orig);
  }
}

}  // namespace
}  // namespace pushpull::opt
