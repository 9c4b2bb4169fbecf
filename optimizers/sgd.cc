// SGD with momentum, Nesterov and L2 weight decay, in the PyTorch formulation (dampening 0):
//   g' = grad_scale*g + wd*p;  buf = mu*buf + g';  d = nesterov ? g' + mu*buf : buf;  p -= lr*d.
// With the buffer initialised to zero, mu*0 + g' = g' gives PyTorch's first step exactly.
#include "optimizers/impl.h"
#include "optimizers/simd.h"

namespace pushpull::opt {
namespace {

using simd::Load;
using simd::Store;

// Threading: immutable after construction; Apply() may run concurrently on disjoint spans.
class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : Optimizer(c) {}

  Kind kind() const override { return Kind::kSgd; }
  int num_slots() const override { return config_.momentum > 0.0f ? 1 : 0; }
  const char* slot_name(int i) const override { return i == 0 && num_slots() == 1 ? "momentum" : ""; }

  void ApplyTo(const float* param_in, float* param_out, float* const* slots, const float* grad, size_t n,
               const StepContext& ctx) const override {
    const float* pin = param_in;  // may be param_out: no __restrict on either
    float* pout = param_out;
    const float* __restrict g = grad;
    const float gs = ctx.grad_scale, lr = ctx.lr, wd = config_.weight_decay;
    const float mu = config_.momentum;
    if (mu == 0.0f) {
      simd::ForEach(n, [=](auto tag, size_t i) {
        using V = decltype(tag);
        const V pi = Load<V>(pin + i);
        const V gi = gs * Load<V>(g + i) + wd * pi;
        Store(pout + i, pi - lr * gi);
      });
      return;
    }
    float* __restrict buf = slots[0];
    if (config_.nesterov) {
      simd::ForEach(n, [=](auto tag, size_t i) {
        using V = decltype(tag);
        const V pi = Load<V>(pin + i);
        const V gi = gs * Load<V>(g + i) + wd * pi;
        const V bi = mu * Load<V>(buf + i) + gi;
        Store(buf + i, bi);
        Store(pout + i, pi - lr * (gi + mu * bi));
      });
    } else {
      simd::ForEach(n, [=](auto tag, size_t i) {
        using V = decltype(tag);
        const V pi = Load<V>(pin + i);
        const V gi = gs * Load<V>(g + i) + wd * pi;
        const V bi = mu * Load<V>(buf + i) + gi;
        Store(buf + i, bi);
        Store(pout + i, pi - lr * bi);
      });
    }
  }
};

}  // namespace

std::unique_ptr<Optimizer> NewSgd(const OptimizerConfig& c) { return std::make_unique<Sgd>(c); }

}  // namespace pushpull::opt
