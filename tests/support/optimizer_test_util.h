// What the optimizer tests share: the library side of a table (parameters and slots as a server
// keeps them), the step contexts and gradients their trajectories use, random vectors and their
// comparison, and config mutators.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "optimizers/optimizer.h"

namespace pushpull::opt::test_util {

// Lengths around the 8-lane vector width: a lone tail, tail only, body + tail, long.
inline constexpr size_t kLengths[] = {1, 7, 33, 1000};
inline constexpr int kSteps = 12;  // of each trajectory
// ExpectClose's tolerance: kAtol + kRtol * |expected|.
inline constexpr double kRtol = 1e-5;
inline constexpr double kAtol = 1e-6;

inline const float kNaN = std::numeric_limits<float>::quiet_NaN();
inline const float kInf = std::numeric_limits<float>::infinity();

// n values drawn uniformly from [lo, hi), the same for the same seed.
inline std::vector<float> Uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], kAtol + kRtol * std::fabs(expected[i])) << what << "[" << i << "]";
  }
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
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
  void Apply(const std::vector<float>& grad, const StepContext& ctx) { Apply(grad.data(), 0, grad.size(), ctx); }

  std::unique_ptr<Optimizer> opt;
  std::vector<float> param;
  std::vector<std::vector<float>> slots;
};

// Varies lr and grad_scale over the steps, as a schedule and BSP averaging would.
inline StepContext Ctx(int step, float base_lr = 0.05f) {
  StepContext ctx;
  ctx.step = step;
  ctx.lr = base_lr * (1.0f + 0.1f * float(step % 4));
  ctx.grad_scale = step % 3 == 0 ? 0.5f : 1.0f;
  return ctx;
}

// Step `step`'s gradient of n values (salt: another one of the same step and length).
inline std::vector<float> Grad(size_t n, int step, uint32_t salt = 0) {
  return Uniform(n, 1000u * uint32_t(step) + uint32_t(n) + salt);
}

// A change to a config: one setting of a trajectory's variant, or one bad field.
using Mutator = std::function<void(OptimizerConfig&)>;

// A trajectory's config: the optimizer's defaults, changed by `mutate`.
struct Variant {
  const char* name;
  Mutator mutate;
};

}  // namespace pushpull::opt::test_util
