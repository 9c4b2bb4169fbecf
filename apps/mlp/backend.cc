// Backend selection and the argument checks shared by the CPU and GPU backends.
#include "apps/mlp/backend.h"

#include <string>

#include "common/log.h"

namespace pushpull::mlp {

Result<Device> ParseDevice(const std::string& s) {
  if (s == "auto") return Device::kAuto;
  if (s == "cpu") return Device::kCpu;
  if (s == "gpu") return Device::kGpu;
  return Status::InvalidArgument("device '" + s + "' is not one of auto|cpu|gpu");
}

int GpuCount() {
  // The device count cannot change under a running process in a way we care about; ask once.
  static const int count = internal::CudaDeviceCount();
  return count;
}

bool GpuAvailable() { return GpuCount() > 0; }

Result<std::unique_ptr<MlpBackend>> MlpBackend::Create(Device device, std::vector<int> layers, int max_batch, int gpu) {
  PP_RETURN_IF_ERROR(internal::CheckLayers(layers, max_batch));
  if (device != Device::kCpu && GpuAvailable() && (gpu < 0 || gpu >= GpuCount()))
    return Status::InvalidArgument("gpu " + std::to_string(gpu) + ": this machine has " + std::to_string(GpuCount()) +
                                   " CUDA devices (0 to " + std::to_string(GpuCount() - 1) + ")");
  switch (device) {
    case Device::kCpu: return internal::NewCpuMlpBackend(std::move(layers), max_batch);
    case Device::kGpu:
      if (!GpuAvailable()) {
#ifdef PUSHPULL_CUDA
        return Status::Unavailable("device=gpu: no usable CUDA device (cudaGetDeviceCount)");
#else
        return Status::Unavailable("device=gpu: this build has no CUDA support (built with CUDA=0)");
#endif
      }
      return internal::NewGpuMlpBackend(std::move(layers), max_batch, gpu);
    case Device::kAuto:
      if (GpuAvailable()) {
        auto g = internal::NewGpuMlpBackend(layers, max_batch, gpu);
        if (g.ok()) return g;
        PP_LOG(Warning) << "--device=auto: the GPU cannot be used (" << g.status().ToString() << "); using the CPU";
      }
      return internal::NewCpuMlpBackend(std::move(layers), max_batch);
  }
  return Status::InvalidArgument("unknown device " + std::to_string(int(device)));
}

namespace internal {

#ifndef PUSHPULL_CUDA
// CUDA=0 builds compile no .cu file; these stand in for the ones in mlp_gpu.cu.
int CudaDeviceCount() { return 0; }
Result<std::unique_ptr<MlpBackend>> NewGpuMlpBackend(std::vector<int>, int, int) {
  return Status::Unavailable("device=gpu: this build has no CUDA support (built with CUDA=0)");
}
#endif

Status CheckLayers(const std::vector<int>& layers, int max_batch) {
  if (layers.size() < 2) {
    return Status::InvalidArgument("MLP needs at least an input and an output layer, got " +
                                   std::to_string(layers.size()) + " sizes");
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] <= 0) {
      return Status::InvalidArgument("MLP layer " + std::to_string(i) + " has size " + std::to_string(layers[i]) +
                                     ", must be > 0");
    }
  }
  // Labels are uint8_t class ids.
  if (layers.back() < 2 || layers.back() > 256) {
    return Status::InvalidArgument("MLP output layer has " + std::to_string(layers.back()) +
                                   " classes, must be in [2, 256]");
  }
  if (max_batch <= 0) {
    return Status::InvalidArgument("MLP max_batch = " + std::to_string(max_batch) + " must be > 0");
  }
  return Status::OK();
}

Status CheckParams(const std::vector<const float*>& params, size_t num_layers) {
  if (params.size() != num_layers) {
    return Status::InvalidArgument("got " + std::to_string(params.size()) + " parameter arrays for " +
                                   std::to_string(num_layers) + " layers");
  }
  for (size_t l = 0; l < params.size(); ++l) {
    if (params[l] == nullptr) {
      return Status::InvalidArgument("parameters of layer " + std::to_string(l) + " are null");
    }
  }
  return Status::OK();
}

Status CheckGrads(const std::vector<float*>& grads, size_t num_layers) {
  if (grads.size() != num_layers) {
    return Status::InvalidArgument("got " + std::to_string(grads.size()) + " gradient arrays for " +
                                   std::to_string(num_layers) + " layers");
  }
  for (size_t l = 0; l < grads.size(); ++l) {
    if (grads[l] == nullptr) {
      return Status::InvalidArgument("gradient of layer " + std::to_string(l) + " is null");
    }
  }
  return Status::OK();
}

Status CheckLabels(const uint8_t* labels, int n, int classes) {
  for (int i = 0; i < n; ++i) {
    if (labels[i] >= classes) {
      return Status::InvalidArgument("label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                                     " is not in [0, " + std::to_string(classes) + ")");
    }
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace pushpull::mlp
