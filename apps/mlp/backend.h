// Compute backends for a multi-layer perceptron (ReLU hidden layers, softmax cross-entropy):
// CPU (Eigen) and GPU (cuBLAS + CUDA kernels). Used by the fmnist_mlp app.
//
// Parameter layout, shared with the server tables: layer l maps in_l -> out_l and is stored as
// one row-major matrix of out_l rows and (in_l + 1) columns; row o holds the weights of output
// unit o followed by its bias: W[o][i] at o*(in_l+1)+i, bias at o*(in_l+1)+in_l.
//
// Threading: a backend is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pushpull/status.h"

namespace pushpull::mlp {

enum class Device : uint8_t { kAuto = 0, kCpu = 1, kGpu = 2 };
Result<Device> ParseDevice(const std::string& s);  // auto|cpu|gpu

// True when a CUDA device is usable (built with CUDA and cudaGetDeviceCount() > 0).
bool GpuAvailable();
// CUDA devices this process sees (0 without CUDA).
int GpuCount();

class MlpBackend {
 public:
  virtual ~MlpBackend() = default;
  // layers: {784, 256, 128, 10}; max_batch: the largest batch passed later; gpu: which CUDA
  // device (0 to GpuCount() - 1; several workers on one machine each take their own).
  // kAuto picks that GPU when GpuAvailable() and it can run this build's kernels, else the CPU
  // (saying why). kGpu without a usable GPU: Unavailable.
  static Result<std::unique_ptr<MlpBackend>> Create(Device device, std::vector<int> layers, int max_batch, int gpu = 0);

  virtual std::string name() const = 0;  // "cpu (Eigen)" or "gpu (cuBLAS, <device name>)"
  const std::vector<int>& layers() const { return layers_; }
  // Floats in layer l's parameter matrix: layers[l+1] * (layers[l] + 1).
  size_t layer_size(int l) const { return size_t(layers_[l + 1]) * (layers_[l] + 1); }

  // Forward and backward on one batch. params[l]: layer l (layout above). x: batch rows of
  // layers[0] floats. labels: batch class ids in [0, layers.back()). Writes the mean softmax
  // cross-entropy over the batch to *loss and d(loss)/d(params[l]) into grads[l] (same layout).
  virtual Status ForwardBackward(const std::vector<const float*>& params, const float* x, const uint8_t* labels,
                                 int batch, const std::vector<float*>& grads, float* loss) = 0;

  // Forward only: argmax class per row into predictions[0..n); n may exceed max_batch (the
  // backend chunks). Optional *loss: mean cross-entropy when labels != nullptr.
  virtual Status Predict(const std::vector<const float*>& params, const float* x, int n, int* predictions,
                         const uint8_t* labels = nullptr, float* loss = nullptr) = 0;

 protected:
  explicit MlpBackend(std::vector<int> layers) : layers_(std::move(layers)) {}
  std::vector<int> layers_;
};

// The concrete backends behind Create(), which validates the arguments first. Defined in
// mlp_cpu.cc and mlp_gpu.cu; without CUDA the GPU one is never called.
namespace internal {
Result<std::unique_ptr<MlpBackend>> NewCpuMlpBackend(std::vector<int> layers, int max_batch);
Result<std::unique_ptr<MlpBackend>> NewGpuMlpBackend(std::vector<int> layers, int max_batch, int gpu);
// Number of usable CUDA devices; 0 when the runtime reports none or fails.
int CudaDeviceCount();
// Argument checks shared by the backends: InvalidArgument naming what is wrong.
Status CheckLayers(const std::vector<int>& layers, int max_batch);
Status CheckParams(const std::vector<const float*>& params, size_t num_layers);
Status CheckGrads(const std::vector<float*>& grads, size_t num_layers);
Status CheckLabels(const uint8_t* labels, int n, int classes);
}  // namespace internal

}  // namespace pushpull::mlp
