// GPU MLP backend: cuBLAS sgemm for the layers, CUDA kernels for the element-wise parts.
//
// cuBLAS is column-major; a row-major r x c matrix is a column-major c x r one, so every
// buffer here is used in place without transposes:
//   layer params P (out x (in+1), row-major)  = column-major (in+1) x out, ld in+1, whose
//                                               first `in` rows are W^T
//   activations A (batch x in, row-major)     = column-major A^T, in x batch, ld in
//   forward   Z^T  = W * A^T        -> sgemm(T, N, out, batch, in)
//   backward  dW^T = A^T * dZ       -> sgemm(N, T, in, out, batch), written with ld in+1
//             dA^T = W^T * dZ^T     -> sgemm(N, N, in, batch, out)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <string>
#include <vector>

#include "apps/mlp/backend.h"
#include "apps/mlp/cuda_util.h"

namespace pushpull::mlp {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = 4;  // softmax: one warp per row

int BlocksFor(size_t n, int threads) {
  // Grid-stride loops cover whatever the cap leaves out.
  return int(std::min<size_t>((n + threads - 1) / threads, 65535));
}

// z[b][o] += bias[o]; then ReLU when relu. The bias of unit o sits at params[o*(in+1)+in].
__global__ void BiasActKernel(float* z, const float* params, int batch, int out, int in, bool relu) {
  const size_t total = size_t(batch) * out;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int o = int(i % out);
    float v = z[i] + params[size_t(o) * (in + 1) + in];
    // NaN stays NaN (fmaxf would make it 0, hiding a diverged model that the CPU backend shows).
    z[i] = relu && !(v > 0.0f) && v == v ? 0.0f : v;
  }
}

// delta[i] = 0 where the ReLU output act[i] is not positive (its input was <= 0), NaN too, as
// the CPU backend does.
__global__ void ReluBackwardKernel(float* delta, const float* act, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if (!(act[i] > 0.0f)) delta[i] = 0.0f;
  }
}

// One warp per row of logits (batch x classes, row-major). Writes, where the pointer is
// non-null: the row's argmax (first maximum, as on the CPU), its cross-entropy
// log(sum exp(z - max)) + max - z[label], and d(loss)/dz scaled by grad_scale (1/batch for the
// mean loss). Subtracting the max keeps exp() finite.
__global__ void SoftmaxXentKernel(const float* logits, const uint8_t* labels, int batch, int classes, float grad_scale,
                                  float* dlogits, float* row_loss, int* argmax) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= batch) return;  // whole warps exit together: row is uniform within a warp
  const float* z = logits + size_t(row) * classes;

  float m = -FLT_MAX;
  int arg = classes;
  for (int c = lane; c < classes; c += 32) {
    if (z[c] > m) {
      m = z[c];
      arg = c;
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, m, off);
    const int oa = __shfl_xor_sync(0xffffffffu, arg, off);
    if (om > m || (om == m && oa < arg)) {
      m = om;
      arg = oa;
    }
  }
  float sum = 0.0f;
  for (int c = lane; c < classes; c += 32) sum += expf(z[c] - m);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);

  if (lane == 0 && argmax != nullptr) argmax[row] = arg < classes ? arg : 0;  // all-NaN row
  if (labels == nullptr) return;
  const int y = labels[row];
  if (lane == 0 && row_loss != nullptr) row_loss[row] = logf(sum) + m - z[y];
  if (dlogits != nullptr) {
    float* d = dlogits + size_t(row) * classes;
    const float inv = 1.0f / sum;
    for (int c = lane; c < classes; c += 32) {
      d[c] = (expf(z[c] - m) * inv - (c == y ? 1.0f : 0.0f)) * grad_scale;
    }
  }
}

// grad[o*(in+1)+in] = sum over rows b of delta[b][o] (the bias gradient). Block (32, 8): x runs
// over units (coalesced reads of a row), y over rows; the 8 partial sums meet in shared memory.
__global__ void BiasGradKernel(const float* delta, int batch, int out, float* grad, int in) {
  __shared__ float partial[8][33];
  const int o = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (o < out) {
    for (int b = threadIdx.y; b < batch; b += 8) s += delta[size_t(b) * out + o];
  }
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && o < out) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += partial[k][threadIdx.x];
    grad[size_t(o) * (in + 1) + in] = t;
  }
}

Status LaunchStatus(const char* kernel) { return cuda::CudaStatus(cudaGetLastError(), kernel); }

// Threading: one thread at a time (the MlpBackend contract). All device work goes on stream_,
// and every public call synchronises it before returning, so no work is in flight between calls.
class GpuMlpBackend final : public MlpBackend {
 public:
  static Result<std::unique_ptr<MlpBackend>> Make(std::vector<int> layers, int max_batch, int gpu) {
    std::unique_ptr<GpuMlpBackend> b(new GpuMlpBackend(std::move(layers), max_batch));
    PP_RETURN_IF_ERROR(b->Init(gpu).Annotate("creating the GPU MLP backend on GPU " + std::to_string(gpu)));
    return std::unique_ptr<MlpBackend>(std::move(b));
  }

  std::string name() const override { return "gpu (cuBLAS, " + device_name_ + ")"; }

  Status ForwardBackward(const std::vector<const float*>& params, const float* x, const uint8_t* labels, int batch,
                         const std::vector<float*>& grads, float* loss) override {
    const int num_layers = int(layers_.size()) - 1;
    PP_RETURN_IF_ERROR(internal::CheckParams(params, num_layers));
    PP_RETURN_IF_ERROR(internal::CheckGrads(grads, num_layers));
    if (batch <= 0 || batch > max_batch_) {
      return Status::InvalidArgument("batch = " + std::to_string(batch) + " is not in [1, " +
                                     std::to_string(max_batch_) + "]");
    }
    if (x == nullptr || labels == nullptr || loss == nullptr) {
      return Status::InvalidArgument("ForwardBackward: x, labels and loss must be non-null");
    }
    PP_CUDA_RETURN_IF_ERROR(cudaSetDevice(dev_));  // (this thread's device may be another)
    PP_RETURN_IF_ERROR(internal::CheckLabels(labels, batch, layers_.back()));

    PP_RETURN_IF_ERROR(UploadParams(params));
    PP_RETURN_IF_ERROR(UploadBatch(x, labels, batch));
    PP_RETURN_IF_ERROR(Forward(batch));
    const int classes = layers_.back();
    SoftmaxXentKernel<<<(batch + kWarpsPerBlock - 1) / kWarpsPerBlock, 32 * kWarpsPerBlock, 0, stream_.get()>>>(
        acts_.back().get(), d_labels_.get(), batch, classes, 1.0f / batch, deltas_.back().get(), d_row_loss_.get(),
        nullptr);
    PP_RETURN_IF_ERROR(LaunchStatus("SoftmaxXentKernel"));
    PP_RETURN_IF_ERROR(Backward(batch));

    PP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_grads_.get(), d_grads_.get(), total_params_ * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_.get()));
    PP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_row_loss_.get(), d_row_loss_.get(), batch * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_.get()));
    PP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    for (int l = 0; l < num_layers; ++l) {
      std::memcpy(grads[l], h_grads_.get() + offsets_[l], layer_size(l) * sizeof(float));
    }
    double sum = 0.0;
    for (int i = 0; i < batch; ++i) sum += h_row_loss_.get()[i];
    *loss = float(sum / batch);
    return Status::OK();
  }

  Status Predict(const std::vector<const float*>& params, const float* x, int n, int* predictions,
                 const uint8_t* labels, float* loss) override {
    const int num_layers = int(layers_.size()) - 1;
    PP_RETURN_IF_ERROR(internal::CheckParams(params, num_layers));
    if (n < 0) return Status::InvalidArgument("Predict: n = " + std::to_string(n) + " < 0");
    if (n > 0 && (x == nullptr || predictions == nullptr)) {
      return Status::InvalidArgument("Predict: x and predictions must be non-null");
    }
    const bool want_loss = labels != nullptr && loss != nullptr;
    if (labels != nullptr) PP_RETURN_IF_ERROR(internal::CheckLabels(labels, n, layers_.back()));
    if (n == 0) {  // (nothing to upload: no copy left running when this returns)
      if (want_loss) *loss = 0.0f;
      return Status::OK();
    }
    PP_CUDA_RETURN_IF_ERROR(cudaSetDevice(dev_));  // (this thread's device may be another)
    PP_RETURN_IF_ERROR(UploadParams(params));
    const int in = layers_[0], classes = layers_.back();
    double loss_sum = 0.0;
    for (int start = 0; start < n; start += max_batch_) {
      const int b = std::min(max_batch_, n - start);
      PP_RETURN_IF_ERROR(UploadBatch(x + size_t(start) * in, want_loss ? labels + start : nullptr, b));
      PP_RETURN_IF_ERROR(Forward(b));
      SoftmaxXentKernel<<<(b + kWarpsPerBlock - 1) / kWarpsPerBlock, 32 * kWarpsPerBlock, 0, stream_.get()>>>(
          acts_.back().get(), want_loss ? d_labels_.get() : nullptr, b, classes, 1.0f, nullptr, d_row_loss_.get(),
          d_pred_.get());
      PP_RETURN_IF_ERROR(LaunchStatus("SoftmaxXentKernel"));
      PP_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(h_pred_.get(), d_pred_.get(), b * sizeof(int), cudaMemcpyDeviceToHost, stream_.get()));
      if (want_loss) {
        PP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_row_loss_.get(), d_row_loss_.get(), b * sizeof(float),
                                                cudaMemcpyDeviceToHost, stream_.get()));
      }
      PP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
      std::memcpy(predictions + start, h_pred_.get(), b * sizeof(int));
      if (want_loss) {
        for (int i = 0; i < b; ++i) loss_sum += h_row_loss_.get()[i];
      }
    }
    if (want_loss) *loss = n > 0 ? float(loss_sum / n) : 0.0f;
    return Status::OK();
  }

 private:
  GpuMlpBackend(std::vector<int> layers, int max_batch) : MlpBackend(std::move(layers)), max_batch_(max_batch) {}

  Status Init(int gpu) {
    dev_ = gpu;
    PP_CUDA_RETURN_IF_ERROR(cudaSetDevice(dev_));
    cudaDeviceProp prop;
    PP_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, dev_));
    device_name_ = prop.name;
    // A GPU older than the code this build carries (PTX for compute capability 7.5 and up) would
    // fail at its first kernel, after the worker joined the job: said here instead.
    cudaFuncAttributes attr;
    if (cudaError_t e = cudaFuncGetAttributes(&attr, BiasActKernel); e != cudaSuccess) {
      cudaGetLastError();
      return Status::Unavailable(device_name_ + " (compute capability " + std::to_string(prop.major) + "." +
                                 std::to_string(prop.minor) + ") cannot run this build's kernels (" +
                                 cudaGetErrorString(e) +
                                 "; this build's kernels are for compute capability 7.5 and up)");
    }

    PP_RETURN_IF_ERROR(stream_.Create());
    PP_RETURN_IF_ERROR(blas_.Create());
    PP_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_.get(), stream_.get()));
    // Plain FP32 (no TF32 tensor cores) so results match the CPU backend to float rounding.
    PP_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(blas_.get(), CUBLAS_DEFAULT_MATH));

    const int num_layers = int(layers_.size()) - 1;
    total_params_ = 0;
    for (int l = 0; l < num_layers; ++l) {
      offsets_.push_back(total_params_);
      total_params_ += layer_size(l);
    }
    PP_RETURN_IF_ERROR(d_params_.Allocate(total_params_));
    PP_RETURN_IF_ERROR(d_grads_.Allocate(total_params_));
    PP_RETURN_IF_ERROR(h_params_.Allocate(total_params_));
    PP_RETURN_IF_ERROR(h_grads_.Allocate(total_params_));
    const size_t batch = size_t(max_batch_);
    PP_RETURN_IF_ERROR(d_x_.Allocate(batch * layers_[0]));
    PP_RETURN_IF_ERROR(h_x_.Allocate(batch * layers_[0]));
    PP_RETURN_IF_ERROR(d_labels_.Allocate(batch));
    PP_RETURN_IF_ERROR(h_labels_.Allocate(batch));
    PP_RETURN_IF_ERROR(d_row_loss_.Allocate(batch));
    PP_RETURN_IF_ERROR(h_row_loss_.Allocate(batch));
    PP_RETURN_IF_ERROR(d_pred_.Allocate(batch));
    PP_RETURN_IF_ERROR(h_pred_.Allocate(batch));
    acts_.resize(num_layers);
    deltas_.resize(num_layers);
    for (int l = 0; l < num_layers; ++l) {
      PP_RETURN_IF_ERROR(acts_[l].Allocate(batch * layers_[l + 1]));
      PP_RETURN_IF_ERROR(deltas_[l].Allocate(batch * layers_[l + 1]));
    }
    return Status::OK();
  }

  // Stages the caller's parameters in pinned memory, then one async copy to the device. The
  // staging memcpy must not overwrite h_params_ while a previous copy still reads it; every call
  // ends with a stream synchronisation, so none does.
  Status UploadParams(const std::vector<const float*>& params) {
    for (size_t l = 0; l < params.size(); ++l) {
      std::memcpy(h_params_.get() + offsets_[l], params[l], layer_size(int(l)) * sizeof(float));
    }
    PP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_params_.get(), h_params_.get(), total_params_ * sizeof(float),
                                            cudaMemcpyHostToDevice, stream_.get()));
    return Status::OK();
  }

  // Copies n rows of x (and labels when non-null) to the device via the pinned staging buffers.
  // Like UploadParams, relies on every call (and every Predict chunk) ending synchronised.
  Status UploadBatch(const float* x, const uint8_t* labels, int n) {
    const size_t x_bytes = size_t(n) * layers_[0] * sizeof(float);
    std::memcpy(h_x_.get(), x, x_bytes);
    PP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_x_.get(), h_x_.get(), x_bytes, cudaMemcpyHostToDevice, stream_.get()));
    if (labels != nullptr) {
      std::memcpy(h_labels_.get(), labels, size_t(n));
      PP_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(d_labels_.get(), h_labels_.get(), size_t(n), cudaMemcpyHostToDevice, stream_.get()));
    }
    return Status::OK();
  }

  const float* LayerParams(int l) const { return d_params_.get() + offsets_[l]; }
  const float* LayerInput(int l) const { return l == 0 ? d_x_.get() : acts_[l - 1].get(); }

  // acts_[l] = layer l's output for `batch` rows (ReLU for hidden layers, logits last).
  Status Forward(int batch) {
    const int num_layers = int(layers_.size()) - 1;
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < num_layers; ++l) {
      const int in = layers_[l], out = layers_[l + 1];
      PP_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one, LayerParams(l),
                                            in + 1, LayerInput(l), in, &zero, acts_[l].get(), out));
      const size_t n = size_t(batch) * out;
      BiasActKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream_.get()>>>(acts_[l].get(), LayerParams(l), batch, out,
                                                                            in, l + 1 < num_layers);
      PP_RETURN_IF_ERROR(LaunchStatus("BiasActKernel"));
    }
    return Status::OK();
  }

  // From deltas_.back() (d loss / d logits) down to the first layer, gradients into d_grads_.
  Status Backward(int batch) {
    const int num_layers = int(layers_.size()) - 1;
    const float one = 1.0f, zero = 0.0f;
    for (int l = num_layers - 1; l >= 0; --l) {
      const int in = layers_[l], out = layers_[l + 1];
      float* g = d_grads_.get() + offsets_[l];
      PP_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, &one, LayerInput(l),
                                            in, deltas_[l].get(), out, &zero, g, in + 1));
      BiasGradKernel<<<(out + 31) / 32, dim3(32, 8), 0, stream_.get()>>>(deltas_[l].get(), batch, out, g, in);
      PP_RETURN_IF_ERROR(LaunchStatus("BiasGradKernel"));
      if (l > 0) {
        PP_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, &one,
                                              LayerParams(l), in + 1, deltas_[l].get(), out, &zero,
                                              deltas_[l - 1].get(), in));
        const size_t n = size_t(batch) * in;
        ReluBackwardKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream_.get()>>>(deltas_[l - 1].get(),
                                                                                   acts_[l - 1].get(), n);
        PP_RETURN_IF_ERROR(LaunchStatus("ReluBackwardKernel"));
      }
    }
    return Status::OK();
  }

  // Set at construction / Init().
  const int max_batch_;
  std::string device_name_;
  int dev_ = 0;                  // the CUDA device everything here lives on
  std::vector<size_t> offsets_;  // layer l's first float in the flat parameter/gradient arrays
  size_t total_params_ = 0;
  cuda::Stream stream_;
  cuda::CublasHandle blas_;
  // Device buffers: flat params and grads, the batch, per-layer outputs and their gradients.
  cuda::DeviceBuffer<float> d_params_, d_grads_, d_x_, d_row_loss_;
  cuda::DeviceBuffer<uint8_t> d_labels_;
  cuda::DeviceBuffer<int> d_pred_;
  std::vector<cuda::DeviceBuffer<float>> acts_, deltas_;
  // Pinned staging for every host <-> device copy.
  cuda::PinnedBuffer<float> h_params_, h_grads_, h_x_, h_row_loss_;
  cuda::PinnedBuffer<uint8_t> h_labels_;
  cuda::PinnedBuffer<int> h_pred_;
};

}  // namespace

namespace internal {

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later runtime calls do not see it
    return 0;
  }
  return n;
}

Result<std::unique_ptr<MlpBackend>> NewGpuMlpBackend(std::vector<int> layers, int max_batch, int gpu) {
  PP_RETURN_IF_ERROR(CheckLayers(layers, max_batch));
  return GpuMlpBackend::Make(std::move(layers), max_batch, gpu);
}

}  // namespace internal
}  // namespace pushpull::mlp
