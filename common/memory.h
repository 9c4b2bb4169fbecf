// Process-wide memory settings for the data path.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace pushpull {

// Large messages (pushes, pull replies) are allocated and freed at a high rate: by ZeroMQ when it
// receives a frame, by the server for a reply, by the client for a push. glibc serves blocks
// over 128 KiB with fresh mmap()s and returns freed heap tops to the kernel, so every such buffer
// page-faults on every touch. This keeps freed memory in the heap instead (mmap threshold and trim
// threshold raised), so a buffer of the same size is reused warm. Called by every daemon's main()
// and the benchmark, before any thread starts.
void TuneMallocForLargeMessages();

// The process's resident memory (/proc/self/statm), 0 where it cannot be read.
size_t ResidentBytes();

// Gives the whole pages of [data + keep_bytes, data + bytes) back to the kernel (MADV_DONTNEED)
// while the allocation stays: for an array whose tail has been copied elsewhere and will not be
// read again, so that copying a large array piece by piece, from its end, never holds both
// copies. Reading those bytes afterwards gives zeros.
void ReleaseTail(const void* data, size_t keep_bytes, size_t bytes);

// An uninitialised float buffer (no zero fill: it is about to be overwritten).
inline std::shared_ptr<float[]> NewFloatBuffer(size_t n) { return std::shared_ptr<float[]>(new float[n]); }

// A std::allocator whose resize() leaves new elements uninitialised (no zero-fill pass over an
// array about to be overwritten).
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using FloatArray = std::vector<float, NoInitAllocator<float>>;

}  // namespace pushpull
