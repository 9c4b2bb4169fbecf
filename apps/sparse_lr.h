// sparse_lr: logistic regression on streamed click-through-style examples (apps/ctr_data.h):
// ~40 active features per example out of a 2^24 hashed id space, ids Zipf-distributed, labels
// drawn from a known sparse true model, so the optimal log loss is known. Only the rows a
// minibatch touches are pulled and pushed; rows are created on first touch; FTRL-Proximal on the
// server by default (AdaGrad as an option). Reports held-out log loss, AUC and the gap to the
// optimum.
#pragma once

#include "apps/app.h"
#include "apps/ctr_data.h"

namespace pushpull {

struct SparseLrOptions {
  CtrConfig data;
  int64_t examples_total = 10000000;  // split evenly over the workers
  int heldout = 100000;               // held-out examples evaluated (by worker 0)
  float ftrl_alpha = 0.2f, ftrl_beta = 1.0f, ftrl_l1 = 4.0f, ftrl_l2 = 1.0f;
  bool mean_gradient = false;  // false: sum of per-example gradients per minibatch
};

Status RunSparseLr(Client& client, const AppOptions& app, const SparseLrOptions& o, AppResult* result);

}  // namespace pushpull
