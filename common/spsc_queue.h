// Bounded single-producer single-consumer queue of pointers: lock-free on the fast path. The
// consumer spins briefly, then sleeps on a condition variable; the producer only touches the
// mutex when the consumer said it was going to sleep.
//
// Threading: exactly one producer thread and one consumer thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace pushpull {

template <typename T>
class SpscQueue {
 public:
  explicit SpscQueue(size_t capacity_pow2 = 1 << 16) : buf_(capacity_pow2), mask_(capacity_pow2 - 1) {}

  // Producer. Returns false if full (the caller backs off and retries).
  bool TryPush(T* item) {
    size_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_.load(std::memory_order_acquire) > mask_) return false;
    buf_[h & mask_] = item;
    head_.store(h + 1, std::memory_order_seq_cst);  // pairs with sleeping_ (Dekker)
    if (sleeping_.load(std::memory_order_seq_cst)) {
      MutexLock l(&mu_);
      cv_.Signal();
    }
    return true;
  }
  void Push(T* item) {
    while (!TryPush(item)) std::this_thread::yield();
  }

  // Consumer: blocks until an item is there.
  T* Pop() {
    for (int spin = 0;; ++spin) {
      size_t t = tail_.load(std::memory_order_relaxed);
      if (head_.load(std::memory_order_acquire) != t) {
        T* item = buf_[t & mask_];
        tail_.store(t + 1, std::memory_order_release);
        return item;
      }
      if (spin < 64) continue;
      if (spin < 128) {
        std::this_thread::yield();
        continue;
      }
      MutexLock l(&mu_);
      sleeping_.store(true, std::memory_order_seq_cst);
      while (head_.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_relaxed)) cv_.Wait(&mu_);
      sleeping_.store(false, std::memory_order_relaxed);
      spin = 0;
    }
  }

 private:
  std::vector<T*> buf_;
  const size_t mask_;
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<bool> sleeping_{false};
  // Only for the consumer's sleep and the producer's wake-up (the queue itself is lock-free); a
  // leaf lock that guards no member.
  Mutex mu_;
  CondVar cv_;
};

}  // namespace pushpull
