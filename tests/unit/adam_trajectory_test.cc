// Adam, AdamW and AMSGrad against a reference trajectory computed here, in double, straight from
// the published update rule (a scalar loop that shares no code with the library).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

// The shared reference-test helpers (tests/support/optimizer_test_util.h).
using namespace test_util;  // NOLINT(build/namespaces)

// The reference update rule, one element at a time, in double.
struct AdamRef {
  std::vector<double> p, m, v, vmax;
  void Step(const OptimizerConfig& c, const StepContext& ctx, const float* grad, size_t begin, size_t n) {
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

TEST(AdamTrajectory, MatchesReference) {
  const std::vector<Variant> variants = {
      {"adam", [](OptimizerConfig& c) { c.kind = Kind::kAdam; }},
      {"adam_l2", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.weight_decay = 0.1f; }},
      {"adamw", [](OptimizerConfig& c) { c.kind = Kind::kAdamW, c.weight_decay = 0.1f; }},
      {"adam_amsgrad", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.amsgrad = true; }},
      {"adamw_amsgrad", [](OptimizerConfig& c) { c.kind = Kind::kAdamW, c.amsgrad = true, c.weight_decay = 0.05f; }},
      {"betas", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.beta1 = 0.5f, c.beta2 = 0.9f; }},
      {"amsgrad_betas", [](OptimizerConfig& c) { c.kind = Kind::kAdam, c.amsgrad = true, c.beta2 = 0.9f; }},
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

}  // namespace
}  // namespace pushpull::opt
