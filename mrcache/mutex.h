// mutex.h: the mutex the cache's state is guarded by, annotated for Clang's
// thread-safety analysis (-Wthread-safety; scripts/test builds the library
// with it and fails on a violation).
//
// A std::mutex underneath, not absl::Mutex: absl::Mutex may allocate
// per-thread waiter state through mmap on first use, and a memory monitor
// may be reporting from inside that very mmap. Members a Mutex guards are
// declared ABSL_GUARDED_BY(mu_); functions that expect it held
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_), or ABSL_SHARED_LOCKS_REQUIRED(mu_) for
// a SharedMutex held at least for reading.
#ifndef MRCACHE_MUTEX_H_
#define MRCACHE_MUTEX_H_

#include <sched.h>

#include <atomic>
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

// A reader-writer lock for state that many threads read and few change (a
// cache's index): any number of readers, or one writer. Writers win: once a
// writer is waiting, new readers wait behind it, so a stream of lookups
// cannot starve a miss. Allocates nothing and calls nothing a memory monitor
// reports from, like Mutex.
//
// How: a writer holds `writer_mu_` for its whole critical section, raises
// `writer_`, then waits until `readers_` is 0. A reader adds itself to
// `readers_`, then checks `writer_`: if it is up, the reader takes itself
// out again and waits on `writer_mu_`. Both orders are sequentially
// consistent, so a reader and a writer cannot both miss each other. Readers
// hold the lock briefly (no registrar call, no allocation), so the writer
// spins for them, yielding the processor after a few rounds.
class ABSL_LOCKABLE SharedMutex {
 public:
  constexpr SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    writer_mu_.lock();
    writer_.store(true, std::memory_order_seq_cst);
    for (int spins = 0; readers_.load(std::memory_order_seq_cst) != 0; ++spins) {
      if (spins >= kSpinsBeforeYield) sched_yield();
    }
  }
  void unlock() ABSL_UNLOCK_FUNCTION() {
    writer_.store(false, std::memory_order_release);
    writer_mu_.unlock();
  }
  void lock_shared() ABSL_SHARED_LOCK_FUNCTION() {
    for (;;) {
      readers_.fetch_add(1, std::memory_order_seq_cst);
      if (!writer_.load(std::memory_order_seq_cst)) return;
      readers_.fetch_sub(1, std::memory_order_release);
      writer_mu_.lock();  // wait for the writer to finish
      writer_mu_.unlock();
    }
  }
  void unlock_shared() ABSL_UNLOCK_FUNCTION() { readers_.fetch_sub(1, std::memory_order_release); }
  // See Mutex::AssertHeld.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  // In a fork child, releases the write lock the forking thread took before
  // fork() (fork_guard.h). Readers of the parent that were backing off at
  // the fork left their count behind; the child has none of those threads.
  void UnlockInForkChild() ABSL_UNLOCK_FUNCTION() {
    readers_.store(0, std::memory_order_relaxed);
    unlock();
  }

 private:
  static constexpr int kSpinsBeforeYield = 64;
  std::mutex writer_mu_;
  std::atomic<bool> writer_{false};
  std::atomic<int> readers_{0};
};

// Holds a Mutex (or a SharedMutex for writing) for its scope; Unlock/Lock
// drop and retake it inside the scope (a miss registers without the lock).
// The destructor unlocks only if it is held.
template <typename M>
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(M* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
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
  M* const mu_;
  bool held_ = true;
};

// Holds a SharedMutex for reading for its scope.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->lock_shared();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock_shared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

}  // namespace mrcache

#endif  // MRCACHE_MUTEX_H_
