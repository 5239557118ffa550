// cache_events.cc: what the process tells a cache -- memory released (in
// a memory event's hook context: no lock, no allocation, no registrar),
// fork(), and the deregistration queue handing back the cache's dead
// regions -- and how the cache knows it is a parent's copy in a fork child.
// The protocol these keep is in cache_impl.h and fork_guard.h; nothing here
// calls the rest of CacheImpl.
#include <unistd.h>

#include <cerrno>
#include <string>

#include "mrcache/core/cache_impl.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/fork_guard.h"

namespace mrcache {

void CacheImpl::OnMemoryRelease(uintptr_t start, uintptr_t end) noexcept {
  // Record first, then bump: a get that sees a new generation drains a ring
  // that already holds the range. Only the lookup entries of regions the
  // range overlaps become void (their buckets'), unless the ring asks to be
  // drained: then every entry does, so that each thread's next get drains.
  const bool drain_soon = ring_.Push(start, end);
  release_gens_.Bump(start, end);
  if (drain_soon) gen_.fetch_add(1, std::memory_order_acq_rel);
}

// The fork handlers lock in one call and unlock in the next: beyond the
// analysis (fork_guard.h states the protocol).
void CacheImpl::OnForkPrepare() noexcept ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.lock(); }

void CacheImpl::OnForkParent() noexcept ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.unlock(); }

void CacheImpl::OnForkChild() noexcept ABSL_NO_THREAD_SAFETY_ANALYSIS {
  gen_.fetch_add(1, std::memory_order_acq_rel);
  // Taken by OnForkPrepare on this (the only) thread: the guarded state is
  // as that thread left it, consistent.
  mu_.UnlockInForkChild();
}

bool CacheImpl::InForkChild() const {
  return ForkGeneration() != fork_generation_ || getpid() != pid_;
}

absl::Status CacheImpl::CheckNotForked(const char* op) const {
  if (__builtin_expect(ForkGeneration() == fork_generation_, 1)) return absl::OkStatus();
  return ErrnoStatus(ECHILD, std::string(op) +
                                 ": this cache belongs to the parent process; after fork() "
                                 "create a new cache in the child");
}

void CacheImpl::DeregisterQueued(Region* list) {
  if (InForkChild()) {
    FreeRegions(list);
    return;
  }
  DeadList dead;
  dead.head = list;
  DeregisterNow(&dead);
}

}  // namespace mrcache
