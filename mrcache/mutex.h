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
// `writer_`, then waits until every reader count is 0. A reader adds itself
// to its slot's count, then checks `writer_`: if it is up, the reader takes
// itself out again, spins until `writer_` falls, and after kSpinsBeforeBlock
// rounds waits on `writer_mu_` instead. Both orders are sequentially
// consistent, so a reader and a writer cannot both miss each other. Readers
// hold the lock briefly (no registrar call, no allocation), so the writer
// spins for them, yielding the processor after a few rounds.
//
// The reader count is split over kReaderSlots cache lines: readers that use
// different slots (the caller chooses, e.g. one per thread) never write the
// same line, so read-locked lookups on several CPUs do not bounce one line
// between them; a writer reads every slot. A reader must unlock the slot it
// locked.
class ABSL_LOCKABLE SharedMutex {
 public:
  static constexpr int kReaderSlots = 8;

  constexpr SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    writer_mu_.lock();
    writer_.store(true, std::memory_order_seq_cst);
    // One look at every slot, without a branch per slot: usually none is
    // held (the miss path takes this lock twice per miss).
    int readers = 0;
    for (const ReaderSlot& slot : readers_) readers |= slot.count.load(std::memory_order_seq_cst);
    if (readers != 0) WaitForReaders();
  }
  void unlock() ABSL_UNLOCK_FUNCTION() {
    writer_.store(false, std::memory_order_release);
    writer_mu_.unlock();
  }
  // `slot` in [0, kReaderSlots) (taken modulo); unlock_shared with the same.
  void lock_shared(int slot = 0) ABSL_SHARED_LOCK_FUNCTION() {
    std::atomic<int>& count = readers_[slot & (kReaderSlots - 1)].count;
    for (;;) {
      count.fetch_add(1, std::memory_order_seq_cst);
      if (!writer_.load(std::memory_order_seq_cst)) return;
      count.fetch_sub(1, std::memory_order_release);
      // Writers hold the lock briefly: spin until this one is done, and
      // sleep on writer_mu_ only if it takes longer. A reader that slept
      // costs a futex wake in the writer's unlock and a context switch
      // here, many times the critical section on a VM.
      for (int spins = 0; writer_.load(std::memory_order_relaxed); ++spins) {
        if (spins >= kSpinsBeforeBlock) {
          writer_mu_.lock();  // wait for the writer to finish
          writer_mu_.unlock();
          break;
        }
        CpuRelax();
      }
    }
  }
  void unlock_shared(int slot = 0) ABSL_UNLOCK_FUNCTION() {
    readers_[slot & (kReaderSlots - 1)].count.fetch_sub(1, std::memory_order_release);
  }
  // See Mutex::AssertHeld.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  // In a fork child, releases the write lock the forking thread took before
  // fork() (fork_guard.h). Readers of the parent that were backing off at
  // the fork left their counts behind; the child has none of those threads.
  void UnlockInForkChild() ABSL_UNLOCK_FUNCTION() {
    for (ReaderSlot& slot : readers_) slot.count.store(0, std::memory_order_relaxed);
    unlock();
  }

 private:
  static_assert((kReaderSlots & (kReaderSlots - 1)) == 0, "a power of two");
  static constexpr int kSpinsBeforeYield = 64;
  // About 10 us of pause instructions (PAUSE takes tens of cycles).
  static constexpr int kSpinsBeforeBlock = 512;
  // Until every reader count is 0 (a writer, with `writer_` up).
  __attribute__((noinline, cold)) void WaitForReaders() const {
    for (const ReaderSlot& slot : readers_) {
      for (int spins = 0; slot.count.load(std::memory_order_seq_cst) != 0; ++spins) {
        if (spins >= kSpinsBeforeYield) sched_yield();
      }
    }
  }
  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }
  struct alignas(64) ReaderSlot {
    std::atomic<int> count{0};
  };
  std::mutex writer_mu_;
  std::atomic<bool> writer_{false};
  ReaderSlot readers_[kReaderSlots];
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

// Holds a SharedMutex for reading for its scope, counted in reader slot
// `slot` (SharedMutex::lock_shared).
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu, int slot = 0) ABSL_SHARED_LOCK_FUNCTION(mu)
      : mu_(mu), slot_(slot) {
    mu_->lock_shared(slot_);
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock_shared(slot_); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
  const int slot_;
};

}  // namespace mrcache

#endif  // MRCACHE_MUTEX_H_
