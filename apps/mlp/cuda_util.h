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

#include "pushpull/status.h"

namespace pushpull::mlp::cuda {

inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  const Code code = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? Code::kUnavailable
                    : e == cudaErrorMemoryAllocation                             ? Code::kResourceExhausted
                                                                                 : Code::kInternal;
  return Status(code, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status CublasStatus(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::OK();
  return Status::Internal(std::string(what) + ": " + cublasGetStatusName(e) + " (" + cublasGetStatusString(e) + ")");
}

#define PP_CUDA_RETURN_IF_ERROR(expr) PP_RETURN_IF_ERROR(::pushpull::mlp::cuda::CudaStatus((expr), #expr))
#define PP_CUBLAS_RETURN_IF_ERROR(expr) PP_RETURN_IF_ERROR(::pushpull::mlp::cuda::CublasStatus((expr), #expr))

// Where a CudaBuffer's memory comes from: device memory (cudaMalloc), or page-locked host memory
// (cudaMallocHost), so that cudaMemcpyAsync on it is truly asynchronous and runs at full bus speed.
struct DeviceMemory {
  static constexpr const char* kAllocate = "cudaMalloc";
  static cudaError_t Allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static void Free(void* p) { cudaFree(p); }
};
struct PinnedMemory {
  static constexpr const char* kAllocate = "cudaMallocHost";
  static cudaError_t Allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static void Free(void* p) { cudaFreeHost(p); }
};

// Owns `count` elements of T in Memory's memory.
template <typename T, typename Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  ~CudaBuffer() { Reset(); }
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  Status Allocate(size_t count) {
    Reset();
    if (count == 0) return Status::OK();
    void* p = nullptr;
    PP_RETURN_IF_ERROR(CudaStatus(Memory::Allocate(&p, count * sizeof(T)), Memory::kAllocate));
    ptr_ = static_cast<T*>(p);
    count_ = count;
    return Status::OK();
  }
  void Reset() {
    // A failing free at teardown has no caller to report to.
    if (ptr_ != nullptr) Memory::Free(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};
template <typename T>
using DeviceBuffer = CudaBuffer<T, DeviceMemory>;
template <typename T>
using PinnedBuffer = CudaBuffer<T, PinnedMemory>;

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

}  // namespace pushpull::mlp::cuda
