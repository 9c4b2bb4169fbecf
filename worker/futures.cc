// Future and PulledRows (include/pushpull/client.h) over the call state of worker/futures.h, and the
// wait in which a caller receives its own replies. Threading: see worker/futures.h.

#include "worker/futures.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/log.h"
#include "common/time.h"

namespace pushpull {
namespace internal {

void FutureState::Complete(int target, const Status& st, int32_t stale) {
  MutexLock l(&mu);
  if (!st.ok() && status.ok()) status = st;
  if (!st.ok() && answered_status.ok()) answered_status = st;
  // A waiter that gave up was told DeadlineExceeded and nothing was written for it since: the
  // call must not turn OK later (a pull's values are not in its destination).
  if (abandoned && status.ok())
    status = Status::DeadlineExceeded(What() + ": a reply came after the wait expired; its values were not written");
  if (stale > staleness) staleness = stale;
  if (target >= 0 && target < static_cast<int>(waiting_on.size()) && waiting_on[target] > 0) --waiting_on[target];
  if (--remaining == 0) {
    remaining_hint.store(0, std::memory_order_release);
    cv.SignalAll();
  }
}

void PulledParts::CheckComplete() const {
  if (!refused.empty()) throw std::logic_error("PulledRows of a pull that failed: " + refused);
  if (landed.load(std::memory_order_acquire) != frames.size())
    throw std::logic_error("PulledRows read before its pull succeeded (" + std::to_string(landed.load()) + " of " +
                           std::to_string(frames.size()) + " server replies in)");
}

const std::vector<PulledParts::Part>& PulledParts::Parts() const {
  CheckComplete();
  std::call_once(listed_, [this] {
    for (size_t s = 0; s < frames.size(); ++s) {
      uint64_t r = keyed ? 0 : first_row[s];
      for (const Frame& f : frames[s]) {
        parts_.push_back({&f, r});
        r += f.size() / sizeof(float) / dim;
      }
    }
  });
  return parts_;
}

const float* PulledParts::Row(size_t i) const {
  if (!keyed) {
    const std::vector<Part>& p = Parts();
    auto it = std::upper_bound(p.begin(), p.end(), i, [](size_t r, const Part& x) { return r < x.first_row; });
    if (it == p.begin()) return nullptr;
    --it;
    if (i - it->first_row >= it->frame->size() / sizeof(float) / dim) return nullptr;
    return static_cast<const float*>(it->frame->data()) + (i - it->first_row) * dim;
  }
  CheckComplete();
  std::call_once(indexed_, [this] {
    rows_.assign(rows, nullptr);
    for (size_t s = 0; s < frames.size(); ++s) {
      size_t j = 0;  // row within this server's reply
      for (const Frame& f : frames[s]) {
        const float* src = static_cast<const float*>(f.data());
        const size_t n = dim ? f.size() / sizeof(float) / dim : 0;
        for (size_t k = 0; k < n; ++k, ++j) {
          const size_t key = key_of_row[s].empty() ? j : key_of_row[s][j];
          rows_[positions[s].empty() ? first_row[s] + key : positions[s][key]] = src + k * dim;
        }
      }
    }
  });
  return rows_[i];
}

Status WaitState(const std::shared_ptr<FutureState>& s_, int64_t timeout_ms, bool abandon) {
  if (!s_) return Status::OK();
  const Deadline deadline = Deadline::In(timeout_ms);
  // While the servers' replies are outstanding, receive them here unless another thread is: the
  // reply then reaches this thread with no hand-off. Otherwise sleep on the condition variable,
  // in short slices so as to take over receiving when the other thread stops.
  while (s_->remaining_hint.load(std::memory_order_acquire) > 0 && !deadline.Expired()) {
    const int64_t left = std::max<int64_t>(1, deadline.RemainingMs());
    if (s_->receiver) {
      ReceiverHandle& rh = *s_->receiver;
      if (rh.mu.TryLock()) {
        Receiver* const client = rh.client;
        if (client) {
          rh.waiter_receiving.store(true, std::memory_order_relaxed);
          client->ReceiveFor(*s_, std::min<int64_t>(left, kReceiveSliceMs));
          rh.waiter_receiving.store(false, std::memory_order_relaxed);
          rh.mu.Unlock();
          continue;
        }
        rh.mu.Unlock();
      }
    }
    MutexLock l(&s_->mu);
    const auto slice =
        s_->receiver ? std::chrono::microseconds(500) : std::chrono::microseconds(std::min<int64_t>(left, 1000) * 1000);
    const auto until = std::chrono::steady_clock::now() + slice;
    while (s_->remaining > 0 && s_->cv.WaitUntil(&s_->mu, until)) {
    }
  }
  MutexLock l(&s_->mu);
  if (s_->remaining > 0) {
    if (abandon) s_->abandoned = true;
    std::string who;
    for (size_t i = 0; i < s_->waiting_on.size(); ++i) {
      if (!s_->waiting_on[i]) continue;
      if (!who.empty()) who += ", ";
      who += i + 1 == s_->waiting_on.size() ? "the scheduler" : "server " + std::to_string(i);
    }
    return Status::DeadlineExceeded(s_->What() + ": no answer within " + std::to_string(timeout_ms) + " ms from " +
                                    who);
  }
  return s_->status;
}

}  // namespace internal

using internal::FutureState;

size_t PulledRows::num_rows() const {
  if (p_ && !p_->refused.empty()) p_->CheckComplete();  // throws
  return p_ ? p_->rows : 0;
}
const float* PulledRows::row(size_t i) const {
  if (p_ && !p_->refused.empty()) p_->CheckComplete();  // throws
  if (!p_ || i >= p_->rows)
    throw std::out_of_range("PulledRows::row(" + std::to_string(i) + ") of " + std::to_string(num_rows()));
  const float* r = p_->Row(i);
  if (!r) throw std::logic_error("PulledRows::row(" + std::to_string(i) + "): no server reply holds it");
  return r;
}
size_t PulledRows::num_parts() const { return p_ ? p_->Parts().size() : 0; }
namespace {
const internal::PulledParts::Part& PartAt(const std::shared_ptr<internal::PulledParts>& p, size_t i) {
  if (!p) throw std::out_of_range("PulledRows::part(" + std::to_string(i) + ") of an empty PulledRows");
  return p->Parts().at(i);
}
}  // namespace
const float* PulledRows::part(size_t i) const { return static_cast<const float*>(PartAt(p_, i).frame->data()); }
size_t PulledRows::part_floats(size_t i) const { return PartAt(p_, i).frame->size() / sizeof(float); }
uint64_t PulledRows::part_first_row(size_t i) const { return PartAt(p_, i).first_row; }
void PulledRows::CopyTo(float* out) const {
  if (!p_) return;  // (never pulled into)
  p_->CheckComplete();
  if (p_->keyed) {
    for (size_t i = 0; i < p_->rows; ++i) std::memcpy(out + i * p_->dim, row(i), p_->dim * sizeof(float));
    return;
  }
  for (size_t s = 0; s < p_->frames.size(); ++s) {
    float* to = out + p_->first_row[s] * p_->dim;
    for (const Frame& f : p_->frames[s]) {
      std::memcpy(to, f.data(), f.size());
      to += f.size() / sizeof(float);
    }
  }
}

Future::Future(std::shared_ptr<internal::FutureState> s) : s_(std::move(s)) {
  if (s_) s_->handles.fetch_add(1, std::memory_order_relaxed);
}
Future::Future(const Future& o) : s_(o.s_) {
  if (s_) s_->handles.fetch_add(1, std::memory_order_relaxed);
}
Future& Future::operator=(const Future& o) {
  if (this != &o) {
    if (o.s_) o.s_->handles.fetch_add(1, std::memory_order_relaxed);
    Release();
    s_ = o.s_;
  }
  return *this;
}
Future& Future::operator=(Future&& o) noexcept {
  if (this != &o) {
    Release();
    s_ = std::move(o.s_);
  }
  return *this;
}
Future::~Future() { Release(); }
void Future::Release() {
  if (!s_) return;
  if (s_->handles.fetch_sub(1, std::memory_order_acq_rel) == 1 && s_->dropped) {
    bool given_up = false;
    std::string what;
    {
      MutexLock l(&s_->mu);
      // (One a wait gave up already was given up where the caller heard of it.)
      if (s_->remaining > 0 && !s_->abandoned) {
        s_->abandoned = true;  // the reply is not written (see Complete)
        given_up = true;
        what = s_->What();
      }
    }
    if (given_up) {
      s_->dropped->count.fetch_add(1, std::memory_order_relaxed);
      if (!s_->dropped->warned.exchange(true)) {
        try {
          PP_LOG(Warning) << what
                          << ": its last Future went before the pull completed, so the pull was given up and "
                             "nothing was written into its destination (keep a pull's Future until it is done; "
                             "ClientStats::pulls_dropped counts these, this is logged once per client)";
        } catch (...) {  // (out of memory for the line: the count stays)
        }
      }
    }
  }
  s_.reset();
}

Status Future::Wait() { return s_ ? WaitFor(s_->default_timeout_ms) : Status::OK(); }

Status Future::WaitFor(int64_t timeout_ms) { return internal::WaitState(s_, timeout_ms, /*abandon=*/true); }

bool Future::Ready() const {
  if (!s_) return true;
  MutexLock l(&s_->mu);
  return s_->remaining <= 0;
}

int32_t Future::staleness() const {
  if (!s_) return 0;
  MutexLock l(&s_->mu);
  return s_->staleness;
}

}  // namespace pushpull
