// Internal to optimizers/: factories for the concrete optimizers, used by Optimizer::Create.
#pragma once

#include <memory>

#include "optimizers/optimizer.h"

namespace pushpull::opt {

std::unique_ptr<Optimizer> NewSgd(const OptimizerConfig& c);
std::unique_ptr<Optimizer> NewAdam(const OptimizerConfig& c);  // Adam and AdamW
std::unique_ptr<Optimizer> NewAdaGrad(const OptimizerConfig& c);
std::unique_ptr<Optimizer> NewFtrl(const OptimizerConfig& c);

}  // namespace pushpull::opt
