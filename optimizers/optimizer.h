// Server-side optimizers: pure functions over contiguous spans of float32.
// No I/O, no sockets, no globals. The server keeps, per table shard, the parameters and
// num_slots() state arrays of the same length (e.g. Adam's m and v), plus a step count per row,
// and calls Apply() on runs of contiguous elements that share a step count.
//
// Threading: an Optimizer is immutable after Create(); Apply() is const and may be called
// concurrently on disjoint spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/status.h"

namespace pushpull::opt {

enum class Kind : uint8_t { kSgd = 0, kAdam = 1, kAdamW = 2, kAdaGrad = 3, kFtrl = 4 };
const char* KindName(Kind k);
// Parses "sgd", "adam", "adamw", "adagrad", "ftrl".
Result<Kind> ParseKind(const std::string& name);

enum class ScheduleKind : uint8_t { kConstant = 0, kStep = 1, kCosine = 2 };
Result<ScheduleKind> ParseScheduleKind(const std::string& name);  // constant|step|cosine

// Learning-rate schedule driven by the table's step count: under BSP the clock (one mean update
// per clock), under SSP/ASP the pushes the server has applied to the table.
struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::kConstant;
  int64_t warmup_steps = 0;   // linear warm-up from lr/warmup_steps to lr over these steps
  int64_t step_size = 1000;   // kStep: multiply by gamma every step_size steps
  float gamma = 0.1f;         // kStep: decay factor, in (0, 1]
  int64_t total_steps = 0;    // kCosine: steps to decay over (> 0 for kCosine)
  float min_lr_ratio = 0.0f;  // kCosine: floor as a fraction of lr, in [0, 1]

  template <class Ar>
  void serialize(Ar& ar) {
    ar(kind, warmup_steps, step_size, gamma, total_steps, min_lr_ratio);
  }
  bool operator==(const ScheduleConfig& o) const;
};

struct OptimizerConfig {
  Kind kind = Kind::kSgd;
  float lr = 0.01f;            // base learning rate (FTRL: alpha is used instead)
  // SGD family
  float momentum = 0.0f;       // in [0, 1)
  bool nesterov = false;       // requires momentum > 0
  float weight_decay = 0.0f;   // >= 0; SGD/Adam: L2 added to the gradient; AdamW: decoupled
  // Adam / AdamW
  float beta1 = 0.9f;          // in [0, 1)
  float beta2 = 0.999f;        // in [0, 1)
  float epsilon = 1e-8f;       // > 0 (also AdaGrad's, whose PyTorch default is 1e-10: set it so to match)
  bool amsgrad = false;
  // AdaGrad
  float initial_accumulator = 0.0f;  // >= 0
  // FTRL-Proximal (McMahan et al. 2013)
  float ftrl_alpha = 0.05f;    // > 0
  float ftrl_beta = 1.0f;      // >= 0
  float ftrl_l1 = 0.0f;        // >= 0
  float ftrl_l2 = 0.0f;        // >= 0
  // Common
  ScheduleConfig schedule;
  float clip_norm = 0.0f;      // >= 0; 0 = off. Clips each push's gradient by its global L2 norm
  bool staleness_aware = false;// divide the step by the push's staleness (Zhang et al. 2016)

  template <class Ar>
  void serialize(Ar& ar) {
    // Bools travel as one byte each; a peer's byte that is neither 0 nor 1 is refused (a bool
    // holding it would be undefined behaviour).
    uint8_t b[3] = {nesterov, amsgrad, staleness_aware};
    ar(kind, lr, momentum, b[0], weight_decay, beta1, beta2, epsilon, b[1],
       initial_accumulator, ftrl_alpha, ftrl_beta, ftrl_l1, ftrl_l2, schedule, clip_norm,
       b[2]);
    if constexpr (Ar::is_loading::value) {
      for (uint8_t x : b)
        if (x > 1) throw std::runtime_error("optimizer config: a flag byte holds " + std::to_string(x) + ", not 0 or 1");
      nesterov = b[0];
      amsgrad = b[1];
      staleness_aware = b[2];
    }
  }
  bool operator==(const OptimizerConfig& o) const;
  bool operator!=(const OptimizerConfig& o) const { return !(*this == o); }
};

// InvalidArgument naming the offending field, e.g. "optimizer.beta1 = 1.5 must be in [0, 1)".
Status Validate(const OptimizerConfig& c);

// The learning rate after the schedule, at the table's step count `table_step` (0-based: the
// number of updates applied before this one).
float ScheduledLr(const OptimizerConfig& c, int64_t table_step);

struct StepContext {
  int64_t step = 1;  // 1-based count of updates to these rows including this one (bias correction)
  float lr = 0.01f;  // effective learning rate: schedule applied, staleness scaling applied
  float grad_scale = 1.0f;  // the gradient is multiplied by this first (BSP mean 1/W, clipping)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Requires Validate(c).ok().
  static std::unique_ptr<Optimizer> Create(const OptimizerConfig& c);

  virtual Kind kind() const = 0;
  // Number of state arrays kept beside the parameters (SGD: 0 or 1, Adam: 2 or 3, ...).
  virtual int num_slots() const = 0;
  virtual const char* slot_name(int i) const = 0;  // "m", "v", "vmax", "momentum", "z", "n", ...
  virtual float slot_init(int i) const { return 0.0f; }

  // One update of n contiguous elements: param[0..n), slots[s][0..n) for s < num_slots(),
  // grad[0..n). The gradient must be finite (the server checks before calling).
  void Apply(float* param, float* const* slots, const float* grad, size_t n,
             const StepContext& ctx) const {
    ApplyTo(param, param, slots, grad, n, ctx);
  }
  // The same update, reading the parameters from param_in and writing them to param_out: the
  // same array, or a fresh one (the server writes out of place while a pull reply it is still
  // sending holds the current array: copy-on-write at no extra pass).
  virtual void ApplyTo(const float* param_in, float* param_out, float* const* slots,
                       const float* grad, size_t n, const StepContext& ctx) const = 0;

 protected:
  explicit Optimizer(const OptimizerConfig& c) : config_(c) {}
  OptimizerConfig config_;
};

// Helpers the server uses on a push before any state is touched.
// The largest gradient magnitude a push may hold: 2^60, whose square (Adam's v, AdaGrad's and
// FTRL's sums) still fits a float, so that no single push makes that state Inf (freezing or
// poisoning its rows without an error). Running sums of hundreds of such pushes still can.
constexpr float kMaxGradient = 1152921504606846976.0f;  // 2^60
// Every x finite and |x| < kMaxGradient.
bool AllUsable(const float* x, size_t n);
// Every x * scale finite and under kMaxGradient in magnitude (a BSP clock's sum of a worker's
// pushes, each usable, times the mean's scale may not be: several pushes of a row in a clock).
bool AllUsableScaled(const float* x, size_t n, float scale);

// Sets this thread to flush denormal floats to zero, results and inputs (x86 FTZ and DAZ, as
// TensorFlow's and most servers' compute threads do): state that decays toward zero (Adam's m
// and v, a momentum buffer, under gradients of 0) becomes 0 instead of sticking at a denormal
// that costs every later update of it a slow microcode path. A no-op elsewhere.
void FlushDenormalsOnThisThread();
double SquaredNorm(const float* x, size_t n);
// Scales x in place so that its L2 norm is at most clip_norm, given its squared norm.
void ClipByNorm(float* x, size_t n, double squared_norm, float clip_norm);

}  // namespace pushpull::opt
