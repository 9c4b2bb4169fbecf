// AdaGrad against a reference trajectory computed here, in double, straight from the published
// update rule (a scalar loop that shares no code with the library).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

// The shared reference-test helpers (tests/support/optimizer_test_util.h).
using namespace test_util;  // NOLINT(build/namespaces)

// The reference update rule, one element at a time, in double.
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

TEST(AdaGradTrajectory, MatchesReference) {
  const std::vector<Variant> variants = {
      {"plain", [](OptimizerConfig&) {}},
      {"initial_accumulator", [](OptimizerConfig& c) { c.initial_accumulator = 0.1f; }},
      {"weight_decay", [](OptimizerConfig& c) { c.weight_decay = 0.05f, c.initial_accumulator = 0.01f; }},
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
      ASSERT_EQ(t.slots.size(), 1u) << "AdaGrad keeps one slot beside the parameters: its accumulator";
      ExpectClose(t.param, ref.p, "param");
      ExpectClose(t.slots[0], ref.acc, "accum");
    }
  }
}

}  // namespace
}  // namespace pushpull::opt
