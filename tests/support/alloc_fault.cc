// Not a test: the test binary's replacement of the global operator new, which fails the one
// allocation a FailAllocation armed (tests/support/alloc_fault.h). Tests that use it assert on
// what the failure does (tests/unit/shard_copy_on_write_test.cc, tests/cluster/consistency_blocking_test.cc).
#include "tests/support/alloc_fault.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace pushpull::fault {
namespace {
// This thread's armed failure (plain values: usable from operator new at any time).
thread_local size_t armed_bytes = 0;  // 0: none
thread_local int armed_skip = 0;
thread_local bool armed_fired = false;
std::atomic<size_t> anywhere_bytes{0};  // 0: none
std::atomic<int> anywhere_skip{0};
std::atomic<bool> anywhere_fired{false};
}  // namespace

FailAllocationAnywhere::FailAllocationAnywhere(size_t bytes, int nth) {
  anywhere_fired = false;
  anywhere_skip = nth;
  anywhere_bytes = bytes;
}
FailAllocationAnywhere::~FailAllocationAnywhere() { anywhere_bytes = 0; }
bool FailAllocationAnywhere::fired() const { return anywhere_fired; }

FailAllocation::FailAllocation(size_t bytes, int nth) {
  armed_bytes = bytes;
  armed_skip = nth;
  armed_fired = false;
}
FailAllocation::~FailAllocation() { armed_bytes = 0; }
bool FailAllocation::fired() const { return armed_fired; }

}  // namespace pushpull::fault

void* operator new(std::size_t n) {
  using namespace pushpull::fault;
  if (armed_bytes != 0 && n == armed_bytes && armed_skip-- == 0) {
    armed_bytes = 0;
    armed_fired = true;
    throw std::bad_alloc();
  }
  if (n != 0 && anywhere_bytes.load(std::memory_order_relaxed) == n && anywhere_skip.fetch_sub(1) == 0) {
    anywhere_bytes = 0;
    anywhere_fired = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The array and nothrow forms go through the ones above too: a sanitizer's own would pair its
// allocations with these frees (and new float[n] is how buffers are made).
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { operator delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { operator delete(p); }
