// fork_guard.h: fork() safety, and a process-wide counter that changes in
// every fork child.
//
// Policy (README "fork()"): a child process never uses its parent's
// registrations. Pinned pages, io_uring tables and RDMA MRs belong to the
// parent (the child's copy-on-write pages are different pages), and monitors
// that watch ranges (uffd) lose their registrations in the child. A cache
// remembers the generation it was created under; in a child it answers every
// call that would reach its registrar (get, put, invalidate, flush, device
// write) with ECHILD, and its destruction frees memory without calling the
// registrar. A new cache made in the child works normally.
//
// The rule that makes fork() safe with other threads busy: a child never
// inherits a held lock. Only the forking thread exists in the child, so a
// mutex another thread held at the fork would stay locked forever. The
// pthread_atfork handlers installed here therefore take, before the fork,
// every lock that a child could need, in this fixed order:
//   1. monitor installation    (monitor.cc InstallMutex)
//   2. patch monitor           (code_patch.cc g_patch_mu)
//   3. uffd monitor            (uffd_monitor.cc WatchMutex)
//   4. listener table          (memory_events.cc TableMutex)
//   5. each cache's mu_        (cache_impl.h), in listener-table order
// and release them in reverse order in the parent and, with the state they
// guard left consistent, in the child. This cannot deadlock because the
// code never waits for an earlier lock of this list while holding a later
// one (a cache's mu_ is never held across a monitor or registrar call, nor
// while adding or removing a listener), no thread forks while holding one of
// them, and none is held across a wait for another thread that could be
// waiting for the forking thread. (glibc takes its malloc locks after the
// prepare handlers, so holding one of these locks across an allocation is
// fine.)
//
// Lock-free state that a thread of the parent can leave half-done is reset
// in the child, where no other thread exists:
//   - the listener table's in-flight report counts (memory_events.cc), which
//     RemoveMemoryEventListener waits on;
//   - the uffd reader's unfinished batch (monitor_sync.cc), which every get
//     waits on; the reader thread itself does not exist in the child, so a
//     cache created in the child that asks for `uffd` installs a new reader
//     with its own userfaultfd (monitor.cc).
// Registrars need no handler: the child never calls a registrar of a cache
// created before the fork (see above), and a cache made in the child builds
// its own registrar; the registrars keep their locks per instance.
// fork() from a signal handler that interrupted mrcache is not supported
// (POSIX makes fork with atfork handlers not async-signal-safe anyway).
//
// Invariants: ForkGeneration() is a single relaxed atomic load (callable on
// every get and from hooks); it is 0 in the original process and increases by
// one in each child, so a grandchild differs from both ancestors.
#ifndef MRCACHE_FORK_GUARD_H_
#define MRCACHE_FORK_GUARD_H_

#include <atomic>
#include <cstdint>

namespace mrcache {
namespace fork_guard_internal {
extern std::atomic<uint64_t> g_fork_generation;
}  // namespace fork_guard_internal

inline uint64_t ForkGeneration() noexcept {
  return fork_guard_internal::g_fork_generation.load(std::memory_order_relaxed);
}

// Installs the atfork handlers if the load-time installation did not run
// (idempotent; never needed by callers in practice, used by AcquireMonitor).
void EnsureForkGuardInstalled();

// The monitors' part of the fork protocol (locks 1-3 above and the uffd
// batch reset), set once by monitor.cc. `prepare` runs first among the
// prepare handlers; `parent` and `child` run last, after the caches and the
// listener table are released (`child` after the generation was raised).
struct ForkHandlers {
  void (*prepare)();
  void (*parent)();
  void (*child)();
};
// Sets the monitors' handlers (a pointer to static storage; a second call
// replaces the first). Safe to call while another thread forks.
void SetMonitorForkHandlers(const ForkHandlers* handlers);

}  // namespace mrcache

#endif  // MRCACHE_FORK_GUARD_H_
