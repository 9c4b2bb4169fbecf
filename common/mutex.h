// A mutex, its scoped lock and a condition variable that Clang's thread-safety analysis
// understands (libstdc++'s std::mutex carries no annotations). Members a mutex guards are
// marked GUARDED_BY(mu_); functions that must be called with it held REQUIRES(mu_), and those
// that take it themselves EXCLUDES(mu_). `make check-threads` compiles the tree with
// -Wthread-safety -Werror, so a contract broken in a change fails the build.
//
// Lock order: where a class holds several mutexes, the order they may be taken in is written
// beside their declarations (ACQUIRED_BEFORE / ACQUIRED_AFTER where Clang can check it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define PP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PP_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) PP_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY PP_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) PP_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) PP_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) PP_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) PP_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) PP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) PP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) PP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) PP_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) PP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) PP_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) PP_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS PP_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace pushpull {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex where it cannot see it (a callback run
  // under a lock its caller took). No check at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock()/Lock() release and retake it inside the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable over a Mutex the caller holds. Waits return with it held again.
class CondVar {
 public:
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // False when the deadline passed first.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
    l.release();
    return woken;
  }
  // False when `ms` milliseconds passed first.
  bool WaitForMs(Mutex* mu, int64_t ms) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + std::chrono::milliseconds(ms));
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace pushpull
