// Out of memory on demand, for tests of what a server guarantees when an allocation fails. The test
// binary replaces the global operator new (tests/support/alloc_fault.cc); while a FailAllocation is
// alive, one chosen allocation of the thread that made it throws std::bad_alloc, as it would on a
// machine out of memory. Every other allocation goes to malloc as usual.
#pragma once

#include <cstddef>

namespace pushpull::fault {

class FailAllocation {
 public:
  // The allocation of exactly `bytes` bytes that is the `nth` (from 0) of that size this thread
  // makes from now on fails, once.
  FailAllocation(size_t bytes, int nth);
  ~FailAllocation();
  FailAllocation(const FailAllocation&) = delete;
  FailAllocation& operator=(const FailAllocation&) = delete;

  bool fired() const;  // the allocation was made, and failed
};

// The same for allocations of any thread (a server's request thread, say): the `nth` allocation
// of exactly `bytes` bytes that any thread makes from now on fails, once.
class FailAllocationAnywhere {
 public:
  FailAllocationAnywhere(size_t bytes, int nth);
  ~FailAllocationAnywhere();
  FailAllocationAnywhere(const FailAllocationAnywhere&) = delete;
  FailAllocationAnywhere& operator=(const FailAllocationAnywhere&) = delete;

  bool fired() const;
};

}  // namespace pushpull::fault
