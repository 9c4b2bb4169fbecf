// AdaGrad (Duchi et al. 2011), diagonal, as PyTorch computes it (no lr decay):
//   g' = grad_scale*g + wd*p;  accum += g'^2;  p -= lr * g' / (sqrt(accum) + eps)
// The accumulator starts at initial_accumulator (slot_init).
#include "optimizers/impl.h"
#include "optimizers/simd.h"

namespace pushpull::opt {
namespace {

using simd::Load;
using simd::Store;

// Threading: immutable after construction; Apply() may run concurrently on disjoint spans.
class AdaGrad final : public Optimizer {
 public:
  explicit AdaGrad(const OptimizerConfig& c) : Optimizer(c) {}

  Kind kind() const override { return Kind::kAdaGrad; }
  int num_slots() const override { return 1; }
  const char* slot_name(int i) const override { return i == 0 ? "accum" : ""; }
  float slot_init(int i) const override { return i == 0 ? config_.initial_accumulator : 0.0f; }

  void ApplyTo(const float* param_in, float* param_out, float* const* slots, const float* grad, size_t n,
               const StepContext& ctx) const override {
    const float* pin = param_in;  // may be param_out: no __restrict on either
    float* pout = param_out;
    float* __restrict acc = slots[0];
    const float* __restrict g = grad;
    const float gs = ctx.grad_scale, lr = ctx.lr, wd = config_.weight_decay;
    const float eps = config_.epsilon;
    simd::ForEach(n, [=](auto tag, size_t i) {
      using V = decltype(tag);
      const V pi = Load<V>(pin + i);
      const V gi = gs * Load<V>(g + i) + wd * pi;
      const V ai = Load<V>(acc + i) + gi * gi;
      Store(acc + i, ai);
      Store(pout + i, pi - lr * gi / (simd::Sqrt(ai) + eps));
    });
  }
};

}  // namespace

std::unique_ptr<Optimizer> NewAdaGrad(const OptimizerConfig& c) { return std::make_unique<AdaGrad>(c); }

}  // namespace pushpull::opt
