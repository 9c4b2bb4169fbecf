// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), with the AMSGrad option, as
// PyTorch computes them:
//   g' = grad_scale*g (+ wd*p for Adam: L2 in the gradient)
//   m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;  (AMSGrad: vmax = max(vmax, v), used for v)
//   AdamW first decays p *= 1 - lr*wd (decoupled), then for both:
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// t = ctx.step is the rows' own update count, so rows of a sparse table that are touched
// rarely get their own bias correction ("lazy Adam").
#include <algorithm>
#include <cmath>

#include "optimizers/impl.h"
#include "optimizers/simd.h"

namespace pushpull::opt {
namespace {

using simd::Load;
using simd::Store;

// Threading: immutable after construction; Apply() may run concurrently on disjoint spans.
class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerConfig& c) : Optimizer(c) {}

  Kind kind() const override { return config_.kind; }
  int num_slots() const override { return config_.amsgrad ? 3 : 2; }
  const char* slot_name(int i) const override {
    static const char* const kNames[] = {"m", "v", "vmax"};
    return i >= 0 && i < num_slots() ? kNames[i] : "";
  }

  void ApplyTo(const float* param_in, float* param_out, float* const* slots, const float* grad, size_t n,
               const StepContext& ctx) const override {
    const bool decoupled = config_.kind == Kind::kAdamW;
    // A step below 1 would make 1 - b1^t zero; treat it as the first step.
    const double t = static_cast<double>(std::max<int64_t>(ctx.step, 1));
    const double bc1 = 1.0 - std::pow(static_cast<double>(config_.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(config_.beta2), t);
    Params k;
    k.gs = ctx.grad_scale;
    k.l2 = decoupled ? 0.0f : config_.weight_decay;
    k.decay = decoupled ? static_cast<float>(1.0 - double(ctx.lr) * config_.weight_decay) : 1.0f;
    k.b1 = config_.beta1;
    k.b2 = config_.beta2;
    k.step_size = static_cast<float>(ctx.lr / bc1);
    k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    k.eps = config_.epsilon;
    if (config_.amsgrad) {
      Run<true>(k, param_in, param_out, slots[0], slots[1], slots[2], grad, n);
    } else {
      Run<false>(k, param_in, param_out, slots[0], slots[1], nullptr, grad, n);
    }
  }

 private:
  struct Params {
    float gs, l2, decay, b1, b2, step_size, inv_sqrt_bc2, eps;
  };

  template <bool kAmsGrad>
  static void Run(const Params& k, const float* pin, float* pout, float* __restrict m, float* __restrict v,
                  float* __restrict vmax, const float* __restrict g, size_t n) {
    const float gs = k.gs, l2 = k.l2, decay = k.decay, b1 = k.b1, b2 = k.b2;
    const float c1 = 1.0f - k.b1, c2 = 1.0f - k.b2;
    const float step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2, eps = k.eps;
    simd::ForEach(n, [=](auto tag, size_t i) {
      using V = decltype(tag);
      const V pi = Load<V>(pin + i);
      const V gi = gs * Load<V>(g + i) + l2 * pi;
      const V mi = b1 * Load<V>(m + i) + c1 * gi;
      const V vi = b2 * Load<V>(v + i) + c2 * (gi * gi);
      Store(m + i, mi);
      Store(v + i, vi);
      V vd = vi;
      if constexpr (kAmsGrad) {
        vd = simd::Max(Load<V>(vmax + i), vi);
        Store(vmax + i, vd);
      }
      const V denom = simd::Sqrt(vd) * inv_sqrt_bc2 + eps;
      Store(pout + i, decay * pi - step_size * mi / denom);
    });
  }
};

}  // namespace

std::unique_ptr<Optimizer> NewAdam(const OptimizerConfig& c) { return std::make_unique<Adam>(c); }

}  // namespace pushpull::opt
