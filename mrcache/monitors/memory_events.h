// memory_events.h: how memory monitors tell caches that memory is going away.
//
// A monitor (monitor_table.h lists them; monitor.h installs them) calls
// ReportMemoryRelease(addr, len) BEFORE the range stops being the memory the
// application had (before the real munmap/madvise/..., or from the uffd reader
// thread for events the kernel already applied). The report is dispatched to
// every registered MemoryEventListener (one per cache).
//
// Hook-safety invariants (docs/ARCHITECTURE.md, "Hook safety"):
//  - ReportMemoryRelease never allocates, never takes a blocking lock, never
//    calls a registrar, and is re-entrant: it may run inside malloc, inside a
//    registrar call of the same thread, or inside another report.
//  - Listeners' OnMemoryRelease obey the same rules.
//  - The listener table is a fixed array of atomic pointers. Removing a
//    listener waits (spinning, never sleeping on a lock a hook could hold)
//    until no report is still running inside it, so a listener's memory may
//    be freed once RemoveMemoryEventListener returns.
#ifndef MRCACHE_MEMORY_EVENTS_H_
#define MRCACHE_MEMORY_EVENTS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mrcache {

class MemoryEventListener {
 public:
  virtual ~MemoryEventListener() = default;
  // [start, end) is about to be (or was just) unmapped, remapped, discarded or
  // replaced. Hook context: no allocation, no blocking, no registrar calls.
  virtual void OnMemoryRelease(uintptr_t start, uintptr_t end) noexcept = 0;
  // fork() (fork_guard.h): OnForkPrepare runs in the forking thread before
  // the fork and takes every lock of the listener that a child could need;
  // exactly one of OnForkParent (in the parent) or OnForkChild (in the
  // child, before the child's own code) follows and releases them. The child
  // call also tells the listener it now lives in a child. No allocation, no
  // registrar calls; only OnForkPrepare may block (on the listener's locks).
  virtual void OnForkPrepare() noexcept {}
  virtual void OnForkParent() noexcept {}
  virtual void OnForkChild() noexcept {}
};

// At most this many listeners (caches) at once in a process.
constexpr int kMaxMemoryEventListeners = 256;

// ENOSPC when the table is full.
absl::Status AddMemoryEventListener(MemoryEventListener* listener);
// Waits until no report is inside `listener`. Not callable from a hook.
void RemoveMemoryEventListener(MemoryEventListener* listener);

// Called by monitors. length 0 is ignored; the range is widened to pages by
// the listeners as they need. Inside a ReleaseFence on the calling thread the
// range is also added to the fence (reported again when the fence closes).
void ReportMemoryRelease(const void* addr, size_t length) noexcept;

// The release rule: a range is reported released before any thread can obtain
// those addresses again, and no registration of its old pages is cached while
// the release is under way. A hook monitor (symbols, patch, jemalloc) opens a
// ReleaseFence on the stack around the call that releases memory:
//
//   ReleaseFence fence;            // opens on this thread
//   ReportMunmap(addr, len);       // reported now (before), and marked in flight
//   syscall(SYS_munmap, ...);      // the addresses become free
//   // ~ReleaseFence: every range is reported again (after), then unmarked.
//
// The report before the call voids every region cached over the range before
// the call can free the addresses. A get that misses while the call is under
// way may register the old pages; the cache refuses to keep a registration
// that overlaps a range in flight (ReleaseInFlight) and retries once the
// fence closes, and the report after the call voids anything registered in
// between. docs/ARCHITECTURE.md states why this is complete.
//
// Hook context: opening, adding and closing never allocate or block. A fence
// holds kMaxFenceRanges ranges; beyond that, and for a range that finds no
// free in-flight slot, it marks "unknown range in flight", which every
// overlap test answers with true until the fence closes (ranges beyond the
// limit are reported again as their hull).
class ReleaseFence;
namespace memory_events_internal {
// The innermost open fence of the calling thread.
extern __thread ReleaseFence* tl_fence __attribute__((tls_model("initial-exec")));
}  // namespace memory_events_internal

class ReleaseFence {
 public:
  static constexpr int kMaxFenceRanges = 4;
  // Inline and touching only this thread's fence pointer until a range is
  // added: hooks open fences on every call, also before a sanitizer runtime
  // (whose own mmap calls they see) is ready for instrumented code.
  ReleaseFence() noexcept : outer_(memory_events_internal::tl_fence) {
    memory_events_internal::tl_fence = this;
  }
  ~ReleaseFence() {
    memory_events_internal::tl_fence = outer_;
    if (count_ != 0 || overflowed_ != 0) Close();
  }
  ReleaseFence(const ReleaseFence&) = delete;
  ReleaseFence& operator=(const ReleaseFence&) = delete;
  // Called by ReportMemoryRelease for the innermost open fence of the thread.
  void Add(uintptr_t start, uintptr_t end) noexcept;

 private:
  // Reports every range again, then takes them out of flight.
  void Close() noexcept;

  struct Range {
    uintptr_t start, end;
    int slot;  // in-flight slot, or -1 if none was free
  };
  Range ranges_[kMaxFenceRanges];
  int count_ = 0;
  // Ranges beyond kMaxFenceRanges: how many, and their hull (reported again,
  // as one range, when the fence closes).
  int overflowed_ = 0;
  uintptr_t overflow_start_ = UINTPTR_MAX, overflow_end_ = 0;
  ReleaseFence* outer_;
};

// True if a fenced release overlapping [start, end) is under way (or one of
// unknown range is). Not hook context; lock-free; one load when none is.
bool ReleaseInFlight(uintptr_t start, uintptr_t end) noexcept;
// Waits until no fenced release overlapping [start, end) is under way, for
// at most `timeout_ns` (yielding first, then sleeping in short steps: the
// releasing thread may be descheduled). Returns false if one still was.
bool WaitForReleasesInFlight(uintptr_t start, uintptr_t end, uint64_t timeout_ns) noexcept;

// The listener table's part of the fork protocol, called by the fork
// guard's pthread_atfork handlers (fork_guard.cc) and never by anything else.
// Lock: takes the table mutex (so no listener comes or goes), then calls
// every listener's OnForkPrepare. Unlock: calls every listener's OnForkParent
// (in_child false) or OnForkChild (in_child true), then releases the table
// mutex. In the child it first clears the counts of reports, and the fenced
// releases in flight, that threads of the parent were running: those threads
// do not exist in the child.
void LockListenersForFork() noexcept;
void UnlockListenersAfterFork(bool in_child) noexcept;

// How many reports have been made (all monitors, process lifetime).
uint64_t MemoryReleaseReportCount() noexcept;

}  // namespace mrcache

#endif  // MRCACHE_MEMORY_EVENTS_H_
