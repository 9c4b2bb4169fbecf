#include "server/consistency/rules.h"

#include <sstream>

namespace pushpull::consistency {

int ClockVector::live_count() const {
  int n = 0;
  for (auto a : alive_) n += a;
  return n;
}

Status ClockVector::Advance(int w, int64_t new_clock) {
  if (w < 0 || w >= size()) return Status::InvalidArgument("worker rank " + std::to_string(w) + " out of range");
  if (!alive_[w]) return Status::FailedPrecondition("worker " + std::to_string(w) + " was declared dead");
  if (new_clock != clock_[w] + 1)
    return Status::FailedPrecondition("worker " + std::to_string(w) + " clock jumps from " + std::to_string(clock_[w]) +
                                      " to " + std::to_string(new_clock));
  clock_[w] = new_clock;
  return Status::OK();
}

int64_t ClockVector::MinLive() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (int w = 0; w < size(); ++w)
    if (alive_[w] && clock_[w] < m) m = clock_[w];
  return m;
}

int64_t ClockVector::MaxLive() const {
  int64_t m = std::numeric_limits<int64_t>::min();
  for (int w = 0; w < size(); ++w)
    if (alive_[w] && clock_[w] > m) m = clock_[w];
  return m;
}

std::string StalenessHistogram::ToString() const {
  std::ostringstream os;
  bool first = true;
  for (int i = 0; i < kBuckets; ++i) {
    if (!counts_[i]) continue;
    os << (first ? "" : " ") << i << (i == kBuckets - 1 ? "+" : "") << ":" << counts_[i];
    first = false;
  }
  return first ? "none" : os.str();
}

}  // namespace pushpull::consistency
