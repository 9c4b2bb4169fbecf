// RAII, move-only owners for CUDA resources, and CUDA/cuBLAS errors turned into Status.
// Host code only (no kernels), but it includes the CUDA headers: include it from .cu files or
// from code compiled with PUSHPULL_CUDA.
//
// Threading: the wrappers are plain owners; a CUDA stream or cuBLAS handle is used by one
// thread at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "common/status.h"

namespace pushpull::cuda {

inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  const Code code = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                        ? Code::kUnavailable
                        : Code::kInternal;
  return Status(code, std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}

inline Status CublasStatus(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::OK();
  return Status::Internal(std::string(what) + ": " + cublasGetStatusName(e) + " (" +
                          cublasGetStatusString(e) + ")");
}

#define PP_CUDA_RETURN_IF_ERROR(expr) \
  PP_RETURN_IF_ERROR(::pushpull::cuda::CudaStatus((expr), #expr))
#define PP_CUBLAS_RETURN_IF_ERROR(expr) \
  PP_RETURN_IF_ERROR(::pushpull::cuda::CublasStatus((expr), #expr))

// Owns `count` elements of T in device memory (cudaMalloc).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  Status Allocate(size_t count) {
    Reset();
    if (count == 0) return Status::OK();
    void* p = nullptr;
    PP_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, count * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    count_ = count;
    return Status::OK();
  }
  void Reset() {
    // A failing cudaFree at teardown has no caller to report to.
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Owns `count` elements of T in page-locked host memory (cudaMallocHost), so that
// cudaMemcpyAsync on it is truly asynchronous and runs at full bus speed.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  Status Allocate(size_t count) {
    Reset();
    if (count == 0) return Status::OK();
    void* p = nullptr;
    PP_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, count * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    count_ = count;
    return Status::OK();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Owns a non-blocking CUDA stream.
class Stream {
 public:
  Stream() = default;
  ~Stream() { Reset(); }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      Reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Status Create() {
    Reset();
    PP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    return Status::OK();
  }
  void Reset() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Owns a cuBLAS handle.
class CublasHandle {
 public:
  CublasHandle() = default;
  ~CublasHandle() { Reset(); }
  CublasHandle(CublasHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& o) noexcept {
    if (this != &o) {
      Reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  Status Create() {
    Reset();
    PP_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h_));
    return Status::OK();
  }
  void Reset() {
    if (h_ != nullptr) cublasDestroy(h_);
    h_ = nullptr;
  }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

}  // namespace pushpull::cuda
