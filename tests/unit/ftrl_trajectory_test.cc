// FTRL-Proximal against a reference trajectory computed here, in double, straight from the
// published update rule (a scalar loop that shares no code with the library).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

// The shared reference-test helpers (tests/support/optimizer_test_util.h).
using namespace test_util;  // NOLINT(build/namespaces)

// The reference update rule, one element at a time, in double.
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

}  // namespace
}  // namespace pushpull::opt
