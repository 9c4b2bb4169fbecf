// Optimizer::Apply's contract (optimizers/optimizer.h): the gradient is scaled first, an empty span
// changes nothing, and disjoint spans applied concurrently match one call over all of them.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/optimizer_test_util.h"

namespace pushpull::opt {
namespace {

using test_util::Ctx;
using test_util::Grad;
using test_util::Table;
using test_util::Uniform;

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

}  // namespace
}  // namespace pushpull::opt
