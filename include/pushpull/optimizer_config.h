// How a table's rows are updated: the optimizer, its hyper-parameters and its learning-rate
// schedule, as a program describes them in a TableSpec (pushpull/table.h). Plain values; the
// servers validate them (Validate) before a table is made and run the update rules
// (optimizers/optimizer.h, internal).
#pragma once

#include <cstdint>
#include <string>

#include "pushpull/status.h"

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

  bool operator==(const ScheduleConfig& o) const;
};

struct OptimizerConfig {
  Kind kind = Kind::kSgd;
  float lr = 0.01f;  // base learning rate (FTRL: alpha is used instead)
  // SGD family
  float momentum = 0.0f;      // in [0, 1)
  bool nesterov = false;      // requires momentum > 0
  float weight_decay = 0.0f;  // >= 0; SGD/Adam: L2 added to the gradient; AdamW: decoupled
  // Adam / AdamW
  float beta1 = 0.9f;     // in [0, 1)
  float beta2 = 0.999f;   // in [0, 1)
  float epsilon = 1e-8f;  // > 0 (also AdaGrad's, whose PyTorch default is 1e-10: set it so to match)
  bool amsgrad = false;
  // AdaGrad
  float initial_accumulator = 0.0f;  // >= 0
  // FTRL-Proximal (McMahan et al. 2013)
  float ftrl_alpha = 0.05f;  // > 0
  float ftrl_beta = 1.0f;    // >= 0
  float ftrl_l1 = 0.0f;      // >= 0
  float ftrl_l2 = 0.0f;      // >= 0
  // Common
  ScheduleConfig schedule;
  float clip_norm = 0.0f;        // >= 0; 0 = off. Clips each push's gradient by its global L2 norm
  bool staleness_aware = false;  // divide the step by the push's staleness (Zhang et al. 2016)

  bool operator==(const OptimizerConfig& o) const;
  bool operator!=(const OptimizerConfig& o) const { return !(*this == o); }
};

// InvalidArgument naming the offending field, e.g. "optimizer.beta1 = 1.5 must be in [0, 1)".
Status Validate(const OptimizerConfig& c);

}  // namespace pushpull::opt
