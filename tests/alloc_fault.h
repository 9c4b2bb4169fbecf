// Out of memory on demand, for tests of what a server guarantees when an allocation fails. The
// test binary replaces the global operator new (tests/alloc_fault.cc); while a FailAllocation is
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

}  // namespace pushpull::fault
