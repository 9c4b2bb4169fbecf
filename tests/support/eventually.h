// Tests' bounded wait for a condition another thread brings about.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "common/time.h"

namespace pushpull {

// Waits (bounded) until `pred` holds; false when it still does not after `ms`.
template <typename P>
bool Eventually(P pred, int64_t ms = 10000) {
  Deadline d = Deadline::In(ms);
  while (!d.Expired()) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace pushpull
