// SGD (with momentum, Nesterov, weight decay) against a reference trajectory computed here, in
// double, straight from the published update rule (a scalar loop that shares no code with the
// library).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

// The shared reference-test helpers (tests/support/optimizer_test_util.h).
using namespace test_util;  // NOLINT(build/namespaces)

// The reference update rule, one element at a time, in double.
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

TEST(SgdTrajectory, MatchesReference) {
  const std::vector<Variant> variants = {
      {"plain", [](OptimizerConfig&) {}},
      {"weight_decay", [](OptimizerConfig& c) { c.weight_decay = 0.1f; }},
      {"momentum", [](OptimizerConfig& c) { c.momentum = 0.9f; }},
      {"nesterov", [](OptimizerConfig& c) { c.momentum = 0.9f, c.nesterov = true; }},
      {"nesterov_wd", [](OptimizerConfig& c) { c.momentum = 0.5f, c.nesterov = true, c.weight_decay = 0.01f; }},
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

}  // namespace
}  // namespace pushpull::opt
