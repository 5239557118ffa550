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

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>

#include <climits>

#include <atomic>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "mrcache/monitors/raw_syscall.h"

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
// reports from, like Mutex (its system calls are raw: raw_syscall.h).
//
// How: `state_` is the writers' lock and the readers' flag at once: kFree,
// kHeld, or kHeldAndSleepers (held, and a thread may sleep on it in the
// kernel: its unlock wakes them all). A writer takes it from kFree with one
// compare-and-swap, then waits until every reader count is 0. A reader adds
// itself to its slot's count, then checks `state_`: if it is held, the reader
// takes itself out again, spins until it is free, and after
// kSpinsBeforeBlock rounds sleeps on it (futex). Both orders are
// sequentially consistent, so a reader and a writer cannot both miss each
// other. Readers hold the lock briefly (no registrar call, no allocation),
// so the writer spins for them, yielding the processor after a few rounds;
// a writer that finds another one spins as long, then sleeps.
//
// The reader count is split over kReaderSlots cache lines: readers that use
// different slots (the caller chooses, e.g. one per thread) never write the
// same line, so read-locked lookups on several CPUs do not bounce one line
// between them. A writer reads the slots in use: slots_in_use_ is one more
// than the highest slot any reader has used, raised by a reader before its
// first count in a new slot, so a process whose readers share slot 0 (one
// thread) costs each writer one slot's line, not kReaderSlots. A reader must
// unlock the slot it locked.
//
// Why a writer that reads only slots_in_use_ slots misses no reader: the
// reader raises slots_in_use_, then adds its count, then loads state_; the
// writer takes state_, then loads slots_in_use_, then the counts, all
// sequentially consistent. A reader that found state_ kFree loaded it before
// the writer took it, so its raise and its count come before the writer's
// loads in that one order, and the writer sees both.
class ABSL_LOCKABLE SharedMutex {
 public:
  static constexpr int kReaderSlots = 8;

  constexpr SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    int free = kFree;
    if (!state_.compare_exchange_strong(free, kHeld, std::memory_order_seq_cst,
                                        std::memory_order_relaxed)) {
      LockContended();
    }
    // One look at each slot in use, the counts OR-ed together: usually none
    // is held (the miss path takes this lock twice per miss).
    const int in_use = slots_in_use_.load(std::memory_order_seq_cst);
    int readers = 0;
    for (int i = 0; i < in_use; ++i) readers |= readers_[i].count.load(std::memory_order_seq_cst);
    if (readers != 0) WaitForReaders();
  }
  void unlock() ABSL_UNLOCK_FUNCTION() {
    if (state_.exchange(kFree, std::memory_order_release) == kHeldAndSleepers) WakeAll();
  }
  // `slot` in [0, kReaderSlots) (taken modulo); unlock_shared with the same.
  void lock_shared(int slot = 0) ABSL_SHARED_LOCK_FUNCTION() {
    const int index = slot & (kReaderSlots - 1);
    if (index >= slots_in_use_.load(std::memory_order_seq_cst)) UseSlot(index);
    std::atomic<int>& count = readers_[index].count;
    for (;;) {
      count.fetch_add(1, std::memory_order_seq_cst);
      if (state_.load(std::memory_order_seq_cst) == kFree) return;
      count.fetch_sub(1, std::memory_order_release);
      // Writers hold the lock briefly: spin until this one is done, and
      // sleep only if it takes longer. A reader that slept costs a futex
      // wake in the writer's unlock and a context switch here, many times
      // the critical section on a VM.
      for (int spins = 0; state_.load(std::memory_order_relaxed) != kFree; ++spins) {
        if (spins >= kSpinsBeforeBlock) {
          SleepWhileHeld();
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
  static constexpr int kFree = 0, kHeld = 1, kHeldAndSleepers = 2;
  static constexpr int kSpinsBeforeYield = 64;
  // About 10 us of pause instructions (PAUSE takes tens of cycles).
  static constexpr int kSpinsBeforeBlock = 512;
  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }
  // A writer that found the lock held: spins, then sleeps until it can
  // take it (marking it kHeldAndSleepers, which it then holds it as).
  __attribute__((noinline)) void LockContended() {
    for (int spins = 0; spins < kSpinsBeforeBlock; ++spins) {
      int free = kFree;
      if (state_.load(std::memory_order_relaxed) == kFree &&
          state_.compare_exchange_weak(free, kHeld, std::memory_order_seq_cst,
                                       std::memory_order_relaxed)) {
        return;
      }
      CpuRelax();
    }
    while (state_.exchange(kHeldAndSleepers, std::memory_order_seq_cst) != kFree) {
      FutexWait(kHeldAndSleepers);
    }
  }
  // A reader: sleeps until the writer holding the lock lets go (or returns
  // at once if it already has).
  __attribute__((noinline)) void SleepWhileHeld() {
    int held = state_.load(std::memory_order_relaxed);
    if (held == kFree) return;
    if (held == kHeld &&
        !state_.compare_exchange_strong(held, kHeldAndSleepers, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
      if (held == kFree) return;  // else another thread marked it meanwhile
    }
    FutexWait(kHeldAndSleepers);
  }
  // Raises slots_in_use_ to index + 1 (it never comes down).
  __attribute__((noinline)) void UseSlot(int index) {
    int in_use = slots_in_use_.load(std::memory_order_seq_cst);
    while (in_use <= index &&
           !slots_in_use_.compare_exchange_weak(in_use, index + 1, std::memory_order_seq_cst)) {
    }
  }
  // Until every reader count is 0 (a writer, holding state_).
  __attribute__((noinline, cold)) void WaitForReaders() const {
    for (const ReaderSlot& slot : readers_) {
      for (int spins = 0; slot.count.load(std::memory_order_seq_cst) != 0; ++spins) {
        if (spins >= kSpinsBeforeYield) sched_yield();
      }
    }
  }
  // Sleeps while state_ == value (returns at once if it is not).
  void FutexWait(int value) {
    RawSyscall(SYS_futex, reinterpret_cast<long>(&state_), FUTEX_WAIT_PRIVATE, value, 0);
  }
  __attribute__((noinline)) void WakeAll() {
    RawSyscall(SYS_futex, reinterpret_cast<long>(&state_), FUTEX_WAKE_PRIVATE, INT_MAX);
  }
  struct alignas(64) ReaderSlot {
    std::atomic<int> count{0};
  };
  static_assert(sizeof(std::atomic<int>) == sizeof(int), "futex word");
  std::atomic<int> state_{kFree};
  // Slots [0, slots_in_use_) may hold readers; on state_'s line, which both
  // readers and writers read anyway.
  std::atomic<int> slots_in_use_{1};
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
