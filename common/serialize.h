// Cereal serialisation of the public configuration types (pushpull/table.h,
// pushpull/optimizer_config.h), kept out of the public headers: non-member serialize()
// overloads in each type's namespace, which Cereal finds by argument-dependent lookup. Include
// this where a Cereal archive reads or writes them (common/wire.cc). The field order is the wire
// format: changing it changes the bytes every peer and checkpoint expects.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "pushpull/optimizer_config.h"
#include "pushpull/table.h"

namespace pushpull {

template <class Ar>
void serialize(Ar& ar, Consistency& c) {
  ar(c.model, c.staleness);
}

}  // namespace pushpull

namespace pushpull::opt {

template <class Ar>
void serialize(Ar& ar, ScheduleConfig& s) {
  ar(s.kind, s.warmup_steps, s.step_size, s.gamma, s.total_steps, s.min_lr_ratio);
}

template <class Ar>
void serialize(Ar& ar, OptimizerConfig& c) {
  // Bools travel as one byte each; a peer's byte that is neither 0 nor 1 is refused (a bool
  // holding it would be undefined behaviour).
  uint8_t b[3] = {c.nesterov, c.amsgrad, c.staleness_aware};
  ar(c.kind, c.lr, c.momentum, b[0], c.weight_decay, c.beta1, c.beta2, c.epsilon, b[1], c.initial_accumulator,
     c.ftrl_alpha, c.ftrl_beta, c.ftrl_l1, c.ftrl_l2, c.schedule, c.clip_norm, b[2]);
  if constexpr (Ar::is_loading::value) {
    for (uint8_t x : b)
      if (x > 1) throw std::runtime_error("optimizer config: a flag byte holds " + std::to_string(x) + ", not 0 or 1");
    c.nesterov = b[0];
    c.amsgrad = b[1];
    c.staleness_aware = b[2];
  }
}

}  // namespace pushpull::opt
