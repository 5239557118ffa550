// fork_guard.h: a process-wide counter that changes in every fork child.
//
// Policy (DESIGN.md section 5, issue 3): a child process never uses its
// parent's registrations. Pinned pages, io_uring tables and RDMA MRs belong
// to the parent (the child's copy-on-write pages are different pages), and
// monitors that watch ranges (uffd) lose their registrations in the child.
// A pthread_atfork child handler, installed when this library is loaded,
// increments the generation and tells every cache (NotifyListenersOfFork in
// memory_events.h), so that even a cache's lock-free hit path stops. A cache remembers the generation it was created
// (or last reset) under and, when ForkGeneration() differs at the start of a
// call, treats every region as invalid: it forgets them without calling the
// registrar (the handles are the parent's) and starts empty.
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

// Installs the atfork handler if the load-time installation did not run
// (idempotent; never needed by callers in practice, used by AcquireMonitor).
void EnsureForkGuardInstalled();

}  // namespace mrcache

#endif  // MRCACHE_FORK_GUARD_H_
