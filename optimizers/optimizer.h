// Server-side optimizers: pure functions over contiguous spans of float32.
// No I/O, no sockets, no globals. The server keeps, per table shard, the parameters and
// num_slots() state arrays of the same length (e.g. Adam's m and v), plus a step count per row,
// and calls Apply() on runs of contiguous elements that share a step count.
//
// Threading: an Optimizer is immutable after Create(); Apply() is const and may be called
// concurrently on disjoint spans.
//
// The configuration a program gives (Kind, OptimizerConfig, Validate, ...) is public:
// pushpull/optimizer_config.h. Nothing here depends on the rest of pushpull.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pushpull/optimizer_config.h"
#include "pushpull/status.h"

namespace pushpull::opt {

// The learning rate after the schedule, at the table's step count `table_step` (0-based: the
// number of updates applied before this one).
float ScheduledLr(const OptimizerConfig& c, int64_t table_step);

struct StepContext {
  int64_t step = 1;         // 1-based count of updates to these rows including this one (bias correction)
  float lr = 0.01f;         // effective learning rate: schedule applied, staleness scaling applied
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
  void Apply(float* param, float* const* slots, const float* grad, size_t n, const StepContext& ctx) const {
    ApplyTo(param, param, slots, grad, n, ctx);
  }
  // The same update, reading the parameters from param_in and writing them to param_out: the
  // same array, or a fresh one (the server writes out of place while a pull reply it is still
  // sending holds the current array: copy-on-write at no extra pass).
  virtual void ApplyTo(const float* param_in, float* param_out, float* const* slots, const float* grad, size_t n,
                       const StepContext& ctx) const = 0;

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
