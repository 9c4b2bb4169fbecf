// The gradient checks and clipping every push goes through (optimizers/optimizer.h): non-finite and
// huge values are found anywhere, norms accumulate in double, and clipping keeps the direction.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

using test_util::kInf;
using test_util::kLengths;
using test_util::kNaN;
using test_util::Uniform;

// Finite gradients of 2^60 or more are refused too: Adam's v (g^2) and the sums of AdaGrad and
// FTRL would be Inf, freezing or poisoning their rows for good.
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
