// mutex.h: the mutex the cache's state is guarded by, annotated for Clang's
// thread-safety analysis (-Wthread-safety; scripts/test builds the library
// with it and fails on a violation).
//
// A std::mutex underneath, not absl::Mutex: absl::Mutex may allocate
// per-thread waiter state through mmap on first use, and a memory monitor
// may be reporting from inside that very mmap. Members a Mutex guards are
// declared ABSL_GUARDED_BY(mu_); functions that expect it held
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_).
#ifndef MRCACHE_MUTEX_H_
#define MRCACHE_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace mrcache {

class ABSL_LOCKABLE Mutex {
 public:
  // Constant-initialised, and trivially destructible like the std::mutex
  // underneath, so a Mutex may be a global used until the process exits.
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis that the caller holds this mutex where it cannot see
  // it (a callback run by a function that requires it). Checks nothing at
  // run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock/Lock drop and retake it inside the
// scope (a miss registers without the lock). The destructor unlocks only if
// it is held.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_->unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_->unlock();
    held_ = false;
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_->lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

}  // namespace mrcache

#endif  // MRCACHE_MUTEX_H_
