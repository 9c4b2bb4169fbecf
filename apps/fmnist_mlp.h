// fmnist_mlp: an MLP (784-256-128-10 by default, ReLU, softmax cross-entropy) on Fashion-MNIST.
// The parameters live in server tables, one per layer (out rows of in+1 floats: weights then
// bias); Adam on the server by default. Each worker trains on its own shard of the 60k training
// images; worker 0 evaluates on the 10k test images after each epoch.
#pragma once

#include <string>
#include <vector>

#include "apps/app.h"
#include "apps/mlp/backend.h"

namespace pushpull {

struct FmnistOptions {
  std::vector<int> layers = {784, 256, 128, 10};
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  mlp::Device device = mlp::Device::kAuto;
  int gpu = -1;         // CUDA device; -1: the worker's rank modulo GpuCount()
  int train_limit = 0;  // > 0: use only this many training images (tests)
  int test_limit = 0;   // > 0: evaluate on only this many test images (tests)
};

// Parses "784,256,128,10".
Result<std::vector<int>> ParseLayers(const std::string& s);

Status RunFmnistMlp(Client& client, const AppOptions& app, const FmnistOptions& o, AppResult* result);

}  // namespace pushpull
