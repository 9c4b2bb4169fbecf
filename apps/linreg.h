// linreg: linear regression on seeded synthetic data with known true weights. Each worker
// trains on its own shard; the loss (mean squared error / 2) converges to the noise floor
// noise^2 / 2.
#pragma once

#include "apps/app.h"

namespace pushpull {

struct LinregOptions {
  int dim = 100;  // features
  int examples_per_worker = 10000;
  float noise = 0.1f;  // label noise stddev; the loss floor is noise^2/2
};

Status RunLinreg(Client& client, const AppOptions& app, const LinregOptions& o, AppResult* result);

// Deterministic shard of the synthetic data set: X (n x dim, row-major) and y.
void MakeLinregData(const LinregOptions& o, uint64_t seed, int shard, std::vector<float>* x, std::vector<float>* y,
                    std::vector<float>* true_w);

}  // namespace pushpull
