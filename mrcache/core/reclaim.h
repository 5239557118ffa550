// reclaim.h: reclamation, the part of the protocol (cache_impl.h) that
// deregisters a region that left the index once its last reference is gone,
// never before: a region leaving the index is retired (its slots marked
// kRetired), then settled (after the fence, if another thread could still
// reach it lock-free): killed if no reference is left, else kept on the
// retired list until a recheck finds its count at zero.
//
// Reclaim owns the retired list and whether the next settle must fence; it
// reads references through the cache's ThreadList and changes nothing else
// of the cache. Which regions leave the index, and taking them out of it,
// are the cache's (CacheImpl::DetachLocked); what is killed goes on a
// DeadList that the cache deregisters once its lock is released.
//
// Not thread-safe: the cache guards it with its lock, held for writing for
// every method but the const ones.
#ifndef MRCACHE_CORE_RECLAIM_H_
#define MRCACHE_CORE_RECLAIM_H_

#include "mrcache/core/region.h"
#include "mrcache/core/thread_cache.h"
#include "mrcache/core/thread_list.h"

namespace mrcache {

// Regions to deregister once the cache lock is released (linked through
// next_dead).
struct DeadList {
  Region* head = nullptr;
  size_t count = 0;  // Regions on the list
  size_t bytes = 0;  // their registered bytes
  // The registered bytes of the Regions whose memory is gone
  // (Invalidation::kMemoryGone), part of `bytes`.
  size_t memory_gone_bytes = 0;
  // A Region that mrc_invalidate took out is on the list
  // (Invalidation::kByCaller): the list is deregistered by its caller.
  bool invalidated_by_caller = false;
  void Push(Region* r) {
    r->next_dead = head;
    head = r;
    ++count;
    bytes += r->reg.length;
    if (r->invalidated == Invalidation::kMemoryGone) memory_gone_bytes += r->reg.length;
    if (r->invalidated == Invalidation::kByCaller) invalidated_by_caller = true;
  }
};

class Reclaim {
 public:
  // Reads and marks the slots of `threads`, the cache's list.
  explicit Reclaim(ThreadList* threads) : threads_(*threads) {}
  Reclaim(const Reclaim&) = delete;
  Reclaim& operator=(const Reclaim&) = delete;

  // r has just left the index (state kInvalid): marks its slots kRetired,
  // so that lock-free hits back off and lock-free puts recheck, and queues
  // it on *candidates (via next_dead) for Settle.
  void Retire(Region* r, Region** candidates) {
    // Lock-free hits and puts learn it from their slots (before the fence
    // Settle does); only another thread's slot needs the fence.
    if (threads_.MarkSlots(r, ThreadCache::kRetired)) needs_fence_ = true;
    r->next_dead = *candidates;
    *candidates = r;
  }
  // Fences if a region retired since the last Settle had a slot in another
  // live thread, then kills each candidate with no reference left and puts
  // the others on the retired list.
  void Settle(Region* candidates, DeadList* dead);
  // r left the index and has no reference left: kDead, its slots marked
  // kDead (before r is freed, so no non-dead slot names a freed region), and
  // on `dead`.
  void Kill(Region* r, DeadList* dead);
  // Kills the retired regions whose last reference is gone.
  void RecheckRetired(DeadList* dead);

  bool has_retired() const { return retired_ != nullptr; }
  // Takes every region off the retired list, calling take(r) for each (the
  // cache's end).
  template <typename Take>
  void TakeAllRetired(Take take) {
    while (retired_ != nullptr) {
      Region* r = retired_;
      UnlinkRetired(r);
      take(r);
    }
  }
  // True if every retired region is kInvalid and marked on_retired_list.
  // O(retired regions): for MRCACHE_DCHECK.
  bool RetiredAgree() const;

 private:
  void LinkRetired(Region* r);
  void UnlinkRetired(Region* r);

  ThreadList& threads_;
  // kInvalid regions still referenced, linked through next_dead and
  // prev_retired.
  Region* retired_ = nullptr;
  // Whether a region retired since the last Settle had a slot in another
  // live thread: only then must Settle fence.
  bool needs_fence_ = false;
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_RECLAIM_H_
