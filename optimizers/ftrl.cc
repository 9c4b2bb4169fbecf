// FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction", Algorithm 1), per coordinate:
//   g' = grad_scale*g;  sigma = (sqrt(n + g'^2) - sqrt(n)) / alpha;  z += g' - sigma*w;
//   n += g'^2;  w = |z| <= l1 ? 0 : -(z - sign(z)*l1) / ((beta + sqrt(n))/alpha + l2)
// The parameter array holds w, which each step recomputes from z and n alone (they start at 0,
// as in Algorithm 1): a table's initial values would be gone after its first update, so FTRL
// tables start from zeros (TableSpec::Validate). weight_decay is not used (l2 is FTRL's own).
//
// Rate: alpha is the learning rate and ctx.lr is ignored, so neither the lr schedule nor
// staleness scaling of ctx.lr applies to FTRL. The reason: sigma assumes one alpha across steps
// (sum of sigma = sqrt(n)/alpha); changing alpha between steps breaks that identity. A caller
// that wants to damp a stale push can scale the gradient through ctx.grad_scale instead.
#include "optimizers/impl.h"
#include "optimizers/simd.h"

namespace pushpull::opt {
namespace {

using simd::Load;
using simd::Store;

// Threading: immutable after construction; Apply() may run concurrently on disjoint spans.
class Ftrl final : public Optimizer {
 public:
  explicit Ftrl(const OptimizerConfig& c) : Optimizer(c) {}

  Kind kind() const override { return Kind::kFtrl; }
  int num_slots() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "z" : i == 1 ? "n" : ""; }

  void ApplyTo(const float* param_in, float* param_out, float* const* slots, const float* grad, size_t n,
               const StepContext& ctx) const override {
    const float* win = param_in;  // may be param_out: no __restrict on either
    float* wout = param_out;
    float* __restrict z = slots[0];
    float* __restrict nn = slots[1];
    const float* __restrict g = grad;
    const float gs = ctx.grad_scale;
    const float inv_alpha = 1.0f / config_.ftrl_alpha, beta = config_.ftrl_beta;
    const float l1 = config_.ftrl_l1, l2 = config_.ftrl_l2;
    simd::ForEach(n, [=](auto tag, size_t i) {
      using V = decltype(tag);
      const V zero{};
      const V l1v = zero + l1;
      const V gi = gs * Load<V>(g + i);
      const V ni = Load<V>(nn + i);
      const V n_new = ni + gi * gi;
      const V sqrt_n_new = simd::Sqrt(n_new);
      const V sigma = (sqrt_n_new - simd::Sqrt(ni)) * inv_alpha;
      const V zi = Load<V>(z + i) + gi - sigma * Load<V>(win + i);
      Store(z + i, zi);
      Store(nn + i, n_new);
      // Both sides are computed and blended per lane; the discarded one may be 0/0.
      const V sign_l1 = zi < zero ? -l1v : l1v;
      const V w_new = (sign_l1 - zi) / ((beta + sqrt_n_new) * inv_alpha + l2);
      Store(wout + i, simd::Abs(zi) > l1v ? w_new : zero);
    });
  }
};

}  // namespace

std::unique_ptr<Optimizer> NewFtrl(const OptimizerConfig& c) { return std::make_unique<Ftrl>(c); }

}  // namespace pushpull::opt
