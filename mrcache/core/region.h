// region.h: one cached registration and the state the cache keeps about it.
//
// A Region covers the aligned range [start, end) with one registration. Its
// reference count is distributed: `locked_refs` (changed under the cache lock)
// plus one counter per thread (ThreadCache::Line::ref_count, changed lock-free
// by its owner thread). The true count is their sum; it is only ever computed
// under the cache lock, after the reclaimer marked the region's slots retired
// and fenced (the protocol in cache_impl.h). locked_refs alone may be negative (a region got
// on one thread and put on another).
//
// Fields marked [immutable] never change after the region is published; a
// holder of a reference may read them without the lock. Everything else is
// guarded by the cache lock. The lock-free hit path never reads a Region: what
// it needs (the range, the recency stamp) lives in the thread's lookup entries
// and reference slots. The lock-free put reads only [immutable] `start` (to
// find its slot), and nothing when it puts the thread's last hit; it learns
// that the region left the index from its slot's state (ThreadCache::kRetired).
#ifndef MRCACHE_REGION_H_
#define MRCACHE_REGION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mrcache/core/interval_tree.h"
#include "mrcache/registrar.h"

// The C API's region handle (mrcache.h's mrc_region_t): an empty base of
// every Region, so a Region* converts to mrc_region_t* and back with
// static_cast, and the handle the C caller holds is the Region itself.
struct mrc_region {};

namespace mrcache {

class CacheImpl;

enum class RegionState {
  kCached,   // in the index (used or unused: the count decides)
  kInvalid,  // out of the index, waiting for its last put
  kDead,     // deregistration pending or done
};

// What took a region out of the index by invalidating its range, which
// decides where it may be deregistered (Deregistration::WorthHandingOver).
enum class Invalidation : uint8_t {
  kNone,  // no invalidation (still cached, or evicted, merged or flushed)
  // Its memory was unmapped or remapped (the monitor's release ring): the
  // registration pins pages the application no longer has, and unpinning
  // them frees them, so it is worth handing to the background thread from
  // a smaller size (async_dereg_invalidated_bytes).
  kMemoryGone,
  // mrc_invalidate: its caller is promised the deregistration before the
  // call returns, or at the region's last put if it is held (mrcache.h), so
  // it is never handed over: a peer's key to that memory is dead when the
  // call returns.
  kByCaller,
};

class Region : public mrc_region {
 public:
  // [immutable] once published.
  uintptr_t start = 0;
  uintptr_t end = 0;
  Registration reg;  // what the registrar returned
  CacheImpl* cache = nullptr;
  bool bypass = false;  // registered directly for one get; deregistered on put

  // Recency: the tick of the last slow-path touch, or of fast-path hits
  // folded in from a reference slot that was reclaimed, migrated or
  // orphaned. Only raised (RaiseLastUse, an atomic maximum), with the cache
  // lock held for reading at least. The region's last use is the
  // max of this and its live slots' ref_last_use.
  std::atomic<uint64_t> last_use{0};

  // Guarded by the cache lock.
  int64_t locked_refs = 0;
  RegionState state = RegionState::kCached;
  // The eviction policy's (eviction.h) while the region is cached:
  uint64_t lru_stamp = 0;      // the tick at which it was last placed at the LRU head
  uint64_t install_stamp = 0;  // lru_stamp when it was installed (a region
                               // never used since: lru_stamp still equal, and
                               // no slot's stamp above it)
  // Eviction passes that found it used since it was placed (ClockEviction:
  // frequency of use, aged by evictions).
  uint8_t periods_used = 0;
  // Whether, and by what, an invalidation took it out of the index
  // (DeadList). Here, in the byte of padding before size_class, so that a
  // Region stays 256 bytes.
  Invalidation invalidated = Invalidation::kNone;
  // The region's size class in the policy's size-class lists
  // (size_classes.h), -1 if in none.
  int16_t size_class = -1;
  // The regions this one stands for: 1, plus the parts of the regions a
  // merge union replaced (saturating). Evictions for bytes weigh a region
  // by its bytes per part (ClockEviction::Weight): a union of small regions
  // is worth what they were.
  uint16_t parts = 1;
  bool on_retired_list = false;
  // When it was indexed it overlapped a region it did not replace (other
  // rights); counted in CacheImpl::overlapping_regions_ while indexed.
  bool overlaps_others = false;
  Region* lru_prev = nullptr;  // LRU list of cached regions (head = most recent)
  Region* lru_next = nullptr;
  Region* size_prev = nullptr;  // the policy's size-class links (size_class)
  Region* size_next = nullptr;
  // The one singly linked list the region is on, if any, one at a time:
  // under the cache lock, a DeadList (to deregister once the lock is
  // released), the retired list (with prev_retired), the candidates of
  // UnindexLocked awaiting SettleLocked, or a collection being built by one
  // function (merge victims, invalidated regions, the destructor's sweep);
  // after deregistration, the quarantine, then a batch of spare Regions.
  Region* next_dead = nullptr;
  Region* prev_retired = nullptr;  // the retired list (on_retired_list)
  // The bytes requested through this region when it was registered, widened
  // to cover the requested bytes of the regions it merged (set before it is
  // published); all of [start, end) if alignment is coarser than a page or
  // the region was bridged.
  // An invalidation drops the region if it overlaps these bytes or spans a
  // whole page of [start, end): memory changes mapping a whole page at a
  // time, and a page stays mapped while any of its bytes is in use, so a
  // neighbour's bytes freed on a shared page leave the region valid. (Most
  // pages overlap these bytes; a page of a merge union may not, when a region
  // it overlapped was not absorbed, e.g. one with an access bit the union
  // lacks: the whole-page rule covers those.)
  uintptr_t used_start = 0;
  uintptr_t used_end = 0;
  // The region's node in the cache's index (IntervalTree::InsertNode), part
  // of the Region so that a miss allocates one object, outside the lock.
  // Linked and unlinked under the cache lock; never freed on its own.
  IntervalTree<Region*>::Node index_node{0, 1, nullptr};

  size_t length() const { return end - start; }
  // Raises last_use to `used` (a slot's stamp that is about to go away, or a
  // shared hit's touch); an atomic maximum, so readers of the lock may race.
  void RaiseLastUse(uint64_t used) {
    uint64_t cur = last_use.load(std::memory_order_relaxed);
    while (cur < used && !last_use.compare_exchange_weak(cur, used, std::memory_order_relaxed)) {
    }
  }
  int remote_access() const { return reg.access & kAccessRemoteBits; }
};

// Four cache lines on LP64: a miss allocates one Region, and the index and
// the eviction policy walk them; a new field goes into padding or is weighed.
static_assert(sizeof(void*) != 8 || sizeof(Region) <= 256, "Region outgrew four cache lines");

// True if a region registered with `have` may serve a request for `want`:
// exactly the same remote rights (an rkey never grants more than asked), and
// every other requested bit present.
inline bool AccessCompatible(int have, int want) {
  return ((have ^ want) & kAccessRemoteBits) == 0 && (want & ~have) == 0;
}

// True if regions registered with `a` and `b` may be merged into one union
// (which takes the local rights of both): the same remote rights and the
// same on-demand paging.
inline bool MergeCompatible(int a, int b) {
  return ((a ^ b) & (kAccessRemoteBits | kAccessOnDemand)) == 0;
}

}  // namespace mrcache

#endif  // MRCACHE_REGION_H_
