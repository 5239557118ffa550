// monitor_sync.h: waiting for releases that are reported after the fact.
//
// Hook monitors (symbols, patch, jemalloc) report a range before it goes
// away, on the thread that releases it. The uffd monitor cannot: the kernel
// applies the unmap first, then queues an event, and the releasing thread
// blocks in the kernel until some thread has READ the event (measured on
// Linux 6.18 for UNMAP, REMOVE and REMAP). The reader thread reports the range
// just after reading it, so between the read and the report there is a short
// window in which munmap has already returned to the application but no cache
// knows yet.
//
// The contract that closes the window: the reader brackets every batch with
// BeginLateReports() before it reads and EndLateReports() after it has
// reported what it read; a cache calls SyncMemoryMonitors() at the start of
// every get (before looking anything up). If the releasing call returned
// before the get started, its event was read inside a batch that had already
// begun, and SyncMemoryMonitors() waits for that batch to end; so the report
// is visible to the get.
//
// Invariants: SyncMemoryMonitors() is two relaxed-ordered atomic loads when
// nothing is in flight; it never blocks on a lock and never allocates. Only
// one thread (the uffd reader) may bracket batches.
#ifndef MRCACHE_MONITOR_SYNC_H_
#define MRCACHE_MONITOR_SYNC_H_

#include <atomic>
#include <cstdint>

namespace mrcache {
namespace monitor_sync_internal {
extern std::atomic<uint64_t> g_batches_begun;
extern std::atomic<uint64_t> g_batches_ended;
void WaitForBatch(uint64_t batch) noexcept;
}  // namespace monitor_sync_internal

// For the single late reporter (uffd reader thread).
void BeginLateReports() noexcept;
void EndLateReports() noexcept;

// In a fork child only (fork_guard.h): the reader thread does not exist
// there, so a batch it had begun would never end and every get would wait for
// it. Marks every begun batch ended (the events it read were the parent's).
void ForgetUnfinishedBatchesInForkChild() noexcept;

// Returns once every release whose system call has returned has been reported.
inline void SyncMemoryMonitors() noexcept {
  using namespace monitor_sync_internal;
  uint64_t begun = g_batches_begun.load(std::memory_order_seq_cst);
  if (g_batches_ended.load(std::memory_order_acquire) != begun) WaitForBatch(begun);
}

}  // namespace mrcache

#endif  // MRCACHE_MONITOR_SYNC_H_
