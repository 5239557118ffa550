// memory_events.h: how memory monitors tell caches that memory is going away.
//
// A monitor (symbols, patch, uffd, jemalloc; see monitor.h) calls
// ReportMemoryRelease(addr, len) BEFORE the range stops being the memory the
// application had (before the real munmap/madvise/..., or from the uffd reader
// thread for events the kernel already applied). The report is dispatched to
// every registered MemoryEventListener (one per cache).
//
// Hook-safety invariants (DESIGN.md section 3, "Invalidation"):
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
// the listeners as they need.
void ReportMemoryRelease(const void* addr, size_t length) noexcept;

// The listener table's part of the fork protocol, called by the fork
// guard's pthread_atfork handlers (fork_guard.cc) and never by anything else.
// Lock: takes the table mutex (so no listener comes or goes), then calls
// every listener's OnForkPrepare. Unlock: calls every listener's OnForkParent
// (in_child false) or OnForkChild (in_child true), then releases the table
// mutex. In the child it first clears the counts of reports that threads of
// the parent were running: those threads do not exist in the child.
void LockListenersForFork() noexcept;
void UnlockListenersAfterFork(bool in_child) noexcept;

// How many reports have been made (all monitors, process lifetime).
uint64_t MemoryReleaseReportCount() noexcept;

}  // namespace mrcache

#endif  // MRCACHE_MEMORY_EVENTS_H_
