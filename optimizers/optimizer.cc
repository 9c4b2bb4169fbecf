// Config names, equality and validation; learning-rate schedules; gradient helpers.
#include "optimizers/optimizer.h"

#if defined(__SSE3__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "optimizers/impl.h"
#include "optimizers/simd.h"

namespace pushpull::opt {

namespace {

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

template <class T>
std::string Str(T v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_enum_v<T>) {
    os << static_cast<int>(v);
  } else {
    os << v;
  }
  return os.str();
}

template <class T>
Status Bad(const char* field, T value, const char* requirement) {
  return Status::InvalidArgument(std::string("optimizer.") + field + " = " + Str(value) + " " + requirement);
}

// The comparisons are written so that NaN fails every one of them.
bool InUnitOpen(float x) { return x >= 0.0f && x < 1.0f; }  // [0, 1)
bool NonNegative(float x) { return std::isfinite(x) && x >= 0.0f; }
bool Positive(float x) { return std::isfinite(x) && x > 0.0f; }

Status ValidateSchedule(const ScheduleConfig& s) {
  switch (s.kind) {
    case ScheduleKind::kConstant:
    case ScheduleKind::kStep:
    case ScheduleKind::kCosine: break;
    default: return Bad("schedule.kind", s.kind, "is not a known schedule (constant, step, cosine)");
  }
  if (s.warmup_steps < 0) return Bad("schedule.warmup_steps", s.warmup_steps, "must be >= 0");
  if (s.step_size <= 0) return Bad("schedule.step_size", s.step_size, "must be > 0");
  if (!(s.gamma > 0.0f && s.gamma <= 1.0f)) {
    return Bad("schedule.gamma", s.gamma, "must be in (0, 1]");
  }
  if (s.total_steps < 0) return Bad("schedule.total_steps", s.total_steps, "must be >= 0");
  if (s.kind == ScheduleKind::kCosine && s.total_steps <= 0) {
    return Bad("schedule.total_steps", s.total_steps, "must be > 0 for a cosine schedule");
  }
  if (!(s.min_lr_ratio >= 0.0f && s.min_lr_ratio <= 1.0f)) {
    return Bad("schedule.min_lr_ratio", s.min_lr_ratio, "must be in [0, 1]");
  }
  return Status::OK();
}

}  // namespace

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kSgd: return "sgd";
    case Kind::kAdam: return "adam";
    case Kind::kAdamW: return "adamw";
    case Kind::kAdaGrad: return "adagrad";
    case Kind::kFtrl: return "ftrl";
  }
  return "unknown";
}

Result<Kind> ParseKind(const std::string& name) {
  const std::string s = Lower(name);
  for (Kind k : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kAdaGrad, Kind::kFtrl}) {
    if (s == KindName(k)) return k;
  }
  return Status::InvalidArgument("unknown optimizer '" + name + "' (expected sgd, adam, adamw, adagrad or ftrl)");
}

Result<ScheduleKind> ParseScheduleKind(const std::string& name) {
  const std::string s = Lower(name);
  if (s == "constant") return ScheduleKind::kConstant;
  if (s == "step") return ScheduleKind::kStep;
  if (s == "cosine") return ScheduleKind::kCosine;
  return Status::InvalidArgument("unknown lr schedule '" + name + "' (expected constant, step or cosine)");
}

bool ScheduleConfig::operator==(const ScheduleConfig& o) const {
  return kind == o.kind && warmup_steps == o.warmup_steps && step_size == o.step_size && gamma == o.gamma &&
         total_steps == o.total_steps && min_lr_ratio == o.min_lr_ratio;
}

bool OptimizerConfig::operator==(const OptimizerConfig& o) const {
  return kind == o.kind && lr == o.lr && momentum == o.momentum && nesterov == o.nesterov &&
         weight_decay == o.weight_decay && beta1 == o.beta1 && beta2 == o.beta2 && epsilon == o.epsilon &&
         amsgrad == o.amsgrad && initial_accumulator == o.initial_accumulator && ftrl_alpha == o.ftrl_alpha &&
         ftrl_beta == o.ftrl_beta && ftrl_l1 == o.ftrl_l1 && ftrl_l2 == o.ftrl_l2 && schedule == o.schedule &&
         clip_norm == o.clip_norm && staleness_aware == o.staleness_aware;
}

// Every field is checked whatever the kind: a nonsense value in an unused field is still a
// mistake in the caller's spec, and the defaults are all valid.
Status Validate(const OptimizerConfig& c) {
  switch (c.kind) {
    case Kind::kSgd:
    case Kind::kAdam:
    case Kind::kAdamW:
    case Kind::kAdaGrad:
    case Kind::kFtrl: break;
    default: return Bad("kind", c.kind, "is not a known optimizer (sgd, adam, adamw, adagrad, ftrl)");
  }
  if (!NonNegative(c.lr)) return Bad("lr", c.lr, "must be finite and >= 0");
  if (!InUnitOpen(c.momentum)) return Bad("momentum", c.momentum, "must be in [0, 1)");
  if (c.nesterov && !(c.momentum > 0.0f)) {
    return Bad("nesterov", c.nesterov, "requires optimizer.momentum > 0");
  }
  if (!NonNegative(c.weight_decay)) {
    return Bad("weight_decay", c.weight_decay, "must be finite and >= 0");
  }
  if (!InUnitOpen(c.beta1)) return Bad("beta1", c.beta1, "must be in [0, 1)");
  if (!InUnitOpen(c.beta2)) return Bad("beta2", c.beta2, "must be in [0, 1)");
  if (!Positive(c.epsilon)) return Bad("epsilon", c.epsilon, "must be finite and > 0");
  if (!NonNegative(c.initial_accumulator)) {
    return Bad("initial_accumulator", c.initial_accumulator, "must be finite and >= 0");
  }
  if (!Positive(c.ftrl_alpha)) return Bad("ftrl_alpha", c.ftrl_alpha, "must be finite and > 0");
  if (!NonNegative(c.ftrl_beta)) return Bad("ftrl_beta", c.ftrl_beta, "must be finite and >= 0");
  if (!NonNegative(c.ftrl_l1)) return Bad("ftrl_l1", c.ftrl_l1, "must be finite and >= 0");
  if (!NonNegative(c.ftrl_l2)) return Bad("ftrl_l2", c.ftrl_l2, "must be finite and >= 0");
  if (!NonNegative(c.clip_norm)) return Bad("clip_norm", c.clip_norm, "must be finite and >= 0");
  // FTRL's step is ftrl_alpha's, per coordinate (optimizers/ftrl.cc): it reads neither lr nor
  // its schedule, so a schedule or staleness_aware asked of it would do nothing, silently.
  if (c.kind == Kind::kFtrl &&
      (c.staleness_aware || c.schedule.kind != ScheduleKind::kConstant || c.schedule.warmup_steps > 0))
    return Status::InvalidArgument(
        "ftrl takes no learning-rate schedule nor staleness_aware: its step size is "
        "ftrl_alpha, per coordinate (lower ftrl_alpha, or raise ftrl_beta, instead)");
  return ValidateSchedule(c.schedule);
}

// Warm-up covers table steps [0, warmup_steps): lr * (t+1)/warmup_steps. The decay schedule
// then counts its own steps from the end of warm-up, s = t - warmup_steps:
//   step:   lr * gamma^floor(s / step_size)
//   cosine: lr * (r + (1-r) * (1 + cos(pi * min(s, total_steps) / total_steps)) / 2),
//           r = min_lr_ratio; it stays at lr*r after total_steps.
float ScheduledLr(const OptimizerConfig& c, int64_t table_step) {
  const ScheduleConfig& s = c.schedule;
  const double lr = c.lr;
  const int64_t t = std::max<int64_t>(table_step, 0);
  if (t < s.warmup_steps) return static_cast<float>(lr * double(t + 1) / double(s.warmup_steps));
  const int64_t after = t - s.warmup_steps;
  switch (s.kind) {
    case ScheduleKind::kConstant: return c.lr;
    case ScheduleKind::kStep: {
      if (s.step_size <= 0) return c.lr;
      return static_cast<float>(lr * std::pow(double(s.gamma), double(after / s.step_size)));
    }
    case ScheduleKind::kCosine: {
      if (s.total_steps <= 0) return c.lr;
      const double progress = double(std::min(after, s.total_steps)) / double(s.total_steps);
      const double r = s.min_lr_ratio;
      return static_cast<float>(lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(M_PI * progress))));
    }
  }
  return c.lr;
}

std::unique_ptr<Optimizer> Optimizer::Create(const OptimizerConfig& c) {
  switch (c.kind) {
    case Kind::kSgd: return NewSgd(c);
    case Kind::kAdam:
    case Kind::kAdamW: return NewAdam(c);
    case Kind::kAdaGrad: return NewAdaGrad(c);
    case Kind::kFtrl: return NewFtrl(c);
  }
  return nullptr;
}

// x*0 is +-0 for finite x and NaN for Inf or NaN, so one sum answers for the whole array
// without a branch per element.
bool AllUsable(const float* x, size_t n) {
  // x * 2^68 is Inf exactly when |x| >= 2^60 (or x is Inf), so x * 2^68 * 0 is NaN exactly when
  // x is NaN, Inf or too large, and NaN sticks in a sum. Four independent sums keep the loop
  // bound by loads, not by the latency of one dependency chain.
  // Last block first: a gradient just received was written front to back, so its end is what is
  // still in the cache, and its start is then what the check leaves there for the update that
  // reads it next, front to back (measured with the transport bench).
  constexpr size_t L = simd::kLanes;
  constexpr float kUp = 295147905179352825856.0f;  // 2^68: kMaxGradient * kUp = 2^128, past FLT_MAX
  static_assert(kMaxGradient * 0.5f * kUp < std::numeric_limits<float>::max(), "2^127 is a float");
  simd::F8 a0{}, a1{}, a2{}, a3{};
  const size_t blocks = n / (4 * L) * (4 * L);
  for (size_t end = blocks; end > 0; end -= 4 * L) {
    const float* b = x + end - 4 * L;
    a0 += simd::Load<simd::F8>(b) * kUp * 0.0f;
    a1 += simd::Load<simd::F8>(b + L) * kUp * 0.0f;
    a2 += simd::Load<simd::F8>(b + 2 * L) * kUp * 0.0f;
    a3 += simd::Load<simd::F8>(b + 3 * L) * kUp * 0.0f;
  }
  size_t i = blocks;
  for (; i + L <= n; i += L) a0 += simd::Load<simd::F8>(x + i) * kUp * 0.0f;
  const simd::F8 a = (a0 + a1) + (a2 + a3);
  float acc = 0.0f;
  for (; i < n; ++i) acc += x[i] * kUp * 0.0f;
  for (size_t k = 0; k < L; ++k) acc += a[k];
  return acc == 0.0f;
}

bool AllUsableScaled(const float* x, size_t n, float scale) {
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok &= std::fabs(x[i] * scale) < kMaxGradient;  // (false for NaN)
  return ok;
}

void FlushDenormalsOnThisThread() {
#if defined(__SSE3__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

double SquaredNorm(const float* x, size_t n) {
  using F4 = float __attribute__((vector_size(16)));
  using D4 = double __attribute__((vector_size(32)));
  D4 acc0{}, acc1{};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F4 lo, hi;
    std::memcpy(&lo, x + i, sizeof lo);
    std::memcpy(&hi, x + i + 4, sizeof hi);
    const D4 dlo = __builtin_convertvector(lo, D4);
    const D4 dhi = __builtin_convertvector(hi, D4);
    acc0 += dlo * dlo;
    acc1 += dhi * dhi;
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const D4 acc = acc0 + acc1;
  return sum + ((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

void ClipByNorm(float* x, size_t n, double squared_norm, float clip_norm) {
  if (!(clip_norm > 0.0f)) return;
  const double norm = std::sqrt(squared_norm);
  if (!(norm > clip_norm)) return;
  const float scale = static_cast<float>(double(clip_norm) / norm);
  float* __restrict p = x;
  simd::ForEach(n, [=](auto tag, size_t i) {
    using V = decltype(tag);
    simd::Store(p + i, simd::Load<V>(p + i) * scale);
  });
}

}  // namespace pushpull::opt
