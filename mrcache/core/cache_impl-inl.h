// cache_impl-inl.h: the lock-free get and put (CacheImpl::InlineAcquire and
// InlinePut), the hit path of the protocol stated in cache_impl.h.
//
// Included by cache_impl.cc only, where Cache::Acquire and Cache::Put are
// defined: the hit inlines into them, one call from the application. It
// writes no shared cache line and reads no Region; whatever it does not find
// in the calling thread's own table goes to the out-of-line slow paths
// (AcquireUncached, PutLocked).
#ifndef MRCACHE_CORE_CACHE_IMPL_INL_H_
#define MRCACHE_CORE_CACHE_IMPL_INL_H_

#include "mrcache/core/cache_impl.h"
#include "mrcache/core/fences.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/monitors/monitor_sync.h"

namespace mrcache {
namespace cache_impl_internal {

// The calling thread's slot for r (its owner), or nullptr: the slot of the
// thread's last hit if that was r, else the one in the set of r's start.
// Either way a non-dead slot naming r (thread_cache.h).
inline ThreadCache::Line* OwnSlot(ThreadCache* tc, const Region* r) {
  if (tc->last_region == r) {
    ThreadCache::Line* last = tc->last_slot;
    if (last->ref_region == r &&
        last->ref_state.load(std::memory_order_relaxed) != ThreadCache::kDead) {
      return last;
    }
  }
  return tc->FindSlot(r, r->start);
}

}  // namespace cache_impl_internal

absl::StatusOr<Region*> CacheImpl::InlineAcquire(void* addr, size_t length, int access) {
  // Releases reported after the fact (uffd) must be visible before we look.
  SyncMemoryMonitors();
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = start + length;
  // Fast path: a valid entry of this thread's lookup table, and a reference
  // counted in this thread's own slot (the same cache line when `addr` is in
  // the region's first page). No shared cache line is written, and the Region
  // is not read. `start < end` rejects length 0 and overflow.
  // The entry is the first of its set, in probe order, that covers the
  // request (usually the home line: one line read).
  ThreadCache* tc = FindThreadCache(uid_);
  const ThreadCache::Line* e = tc != nullptr ? tc->FindEntry(start, end, access) : nullptr;
  if (e != nullptr && start < end) {
    uint64_t gen = gen_.load(std::memory_order_acquire);
    // The release generation of the entry's region (cache_impl.h).
    const uint64_t released =
        release_gens_.Counter(e->release_level, e->start).load(std::memory_order_acquire);
    if (e->gen == gen + released) {
      Region* r = e->region;
      ThreadCache::Line& slot = tc->lines[e->slot];
      // A live slot naming r is r's, and r is in the index (thread_cache.h;
      // r's memory is not reused while an entry may name it: Quarantine).
      if (slot.ref_region == r &&
          slot.ref_state.load(std::memory_order_relaxed) == ThreadCache::kLive) {
        int64_t count = slot.ref_count.load(std::memory_order_relaxed);
        slot.ref_count.store(count + 1, std::memory_order_relaxed);
        ReaderFence();
        if (slot.ref_state.load(std::memory_order_acquire) == ThreadCache::kLive &&
            gen_.load(std::memory_order_acquire) == gen) {
          slot.ref_last_use.store(tick_.load(std::memory_order_relaxed), std::memory_order_relaxed);
          ThreadCache::OwnerAdd(tc->hits, 1);
          tc->last_region = r;
          tc->last_slot = &slot;
          return r;
        }
        slot.ref_count.store(count, std::memory_order_release);  // back off
      }
    }
  }
  return AcquireUncached(start, end, length, access);
}

absl::Status CacheImpl::InlinePut(Region* r) {
  // In a fork child a put could reach the parent's registrar (settling).
  // Two read-mostly words: no shared-line traffic on the fast path.
  if (__builtin_expect(ForkGeneration() != fork_generation_, 0)) return CheckNotForked("mrc_put");
  // Fast path first: a reference counted in this thread's own slot. A
  // non-dead slot of this cache naming r proves r is ours and alive (see
  // thread_cache.h); implicit and bypass regions never have one. The slot of
  // the thread's last hit is known without reading r.
  ThreadCache* tc = FindThreadCache(uid_);
  if (ThreadCache::Line* slot =
          tc != nullptr && r != nullptr ? cache_impl_internal::OwnSlot(tc, r) : nullptr) {
    int64_t count = slot->ref_count.load(std::memory_order_relaxed);
    if (__builtin_expect(count > 0, 1)) {
      slot->ref_count.store(count - 1, std::memory_order_release);
      // Pairs with the reclaimer's [mark kRetired; fence; sum]: either it
      // counts our decrement, or we see the mark and settle the region
      // ourselves. The slot is thread-local memory: reading it after the
      // decrement is safe even if r has been freed meanwhile.
      ReaderFence();
      if (__builtin_expect(slot->ref_state.load(std::memory_order_acquire) != ThreadCache::kLive,
                           0)) {
        SettleRetired();
      }
      return absl::OkStatus();
    }
  }
  return PutLocked(r);
}

}  // namespace mrcache

#endif  // MRCACHE_CORE_CACHE_IMPL_INL_H_
