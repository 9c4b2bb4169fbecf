// Monotonic time helpers and deadlines. Every wait in pushpull takes a Deadline.
#pragma once

#include <chrono>
#include <cstdint>

namespace pushpull {

using Clock = std::chrono::steady_clock;

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}
inline int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
}

class Deadline {
 public:
  // (ms beyond Never()'s, up to INT64_MAX, is Never(): no overflow.)
  static Deadline In(int64_t ms) { return ms >= INT64_MAX / 4 ? Never() : Deadline(NowMs() + ms); }
  static Deadline Never() { return Deadline(INT64_MAX / 4); }
  int64_t at_ms() const { return at_ms_; }
  int64_t RemainingMs() const {
    int64_t r = at_ms_ - NowMs();
    return r < 0 ? 0 : r;
  }
  bool Expired() const { return NowMs() >= at_ms_; }

 private:
  explicit Deadline(int64_t at) : at_ms_(at) {}
  int64_t at_ms_;
};

}  // namespace pushpull
