// miss.h: the types of a get that missed the lock-free path (cache_impl.h,
// AcquireSlow): the Miss across its attempts, the MissPlan of one attempt,
// the Attempt's registration, and the PendingMiss that records what changed
// while it registered outside the lock; and what a spoiled attempt does
// next (RetryAfterSpoil).
//
// Plain values: the cache fills and reads them under its lock, except an
// Attempt, made outside it. PendingMisses is guarded by the cache's lock.
#ifndef MRCACHE_CORE_MISS_H_
#define MRCACHE_CORE_MISS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mrcache/core/range.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/registrar.h"

namespace mrcache {

// A miss registering outside the lock (linked in PendingMisses, both ways,
// so that it leaves the list without walking it).
// [start, end) is everything it may register (a bridging plan's whole
// block); the invalidations that overlap it meanwhile are recorded, the
// first kExact of them exactly and the rest as their hull. Once the miss
// knows what it registered, only a recorded invalidation that overlaps
// that range spoils it: unrelated releases elsewhere in a bridging block
// (a busy allocator next door) do not, wherever they fall around it.
struct PendingMiss {
  static constexpr int kExact = 8;
  uintptr_t start = 0, end = 0;
  uintptr_t seen_start[kExact], seen_end[kExact];  // the first `seen` are set
  int seen = 0;
  uintptr_t hull_start = UINTPTR_MAX, hull_end = 0;
  PendingMiss* next = nullptr;
  PendingMiss* prev = nullptr;  // toward the head (null at the head)
  void Record(uintptr_t s, uintptr_t e) {
    if (seen < kExact) {
      seen_start[seen] = s;
      seen_end[seen++] = e;
      return;
    }
    if (s < hull_start) hull_start = s;
    if (e > hull_end) hull_end = e;
  }
  bool Spoils(uintptr_t s, uintptr_t e) const {
    if (__builtin_expect(seen == 0, 1)) return false;  // the hull grows after kExact
    for (int i = 0; i < seen; ++i) {
      if (seen_start[i] < e && s < seen_end[i]) return true;
    }
    return hull_start < e && s < hull_end;
  }
};

// What a miss registers: [start, end) (the request merged with the regions
// it overlaps), with the local rights of those regions added to the
// request's. If block_end > block_start, bridging may widen it, within
// [block_start, block_end), over resident memory of the same mapping, when
// that reaches the nearest compatible region below (ending at below_end)
// or above (starting at above_start), adding bridge_local.
struct MissPlan {
  uintptr_t start = 0, end = 0;
  int local = 0;
  uintptr_t block_start = 0, block_end = 0;
  uintptr_t below_end = 0, above_start = UINTPTR_MAX;
  int bridge_local = 0;
  // Whether any region at all overlapped the request when it was planned
  // (MissPlanner::Plan, exact then). False: no region can lie inside [start,
  // end) unless one was installed since. A plan rebuilt later
  // (FitPlanLocked narrowing it) keeps the default, true: unknown.
  bool overlapped = true;
  bool has_block() const { return block_end > block_start; }
};

// One get that missed the lock-free path, across its attempts. The first
// block is fixed by the request; the second is what earlier attempts
// taught (AfterRefusal and AfterSpoil change it).
struct Miss {
  uintptr_t start = 0, end = 0;            // as asked
  int user_access = 0;                     // as asked (lookups are keyed by it)
  int access = 0;                          // registered: user_access, on demand under explicit ODP
  uintptr_t page_start = 0, page_end = 0;  // the smallest range ever registered
  bool remote = false;                     // remote rights: never aligned beyond pages

  uintptr_t plan_start = 0, plan_end = 0;  // what the next plan widens from
  bool allow_merge = false;
  bool counted = false;     // counted already, as a miss or a slow hit
  int memory_refusals = 0;  // registrar ENOMEM/EAGAIN so far
  int widened_spoils = 0;   // attempts whose widened registration was spoiled
  int exact_spoils = 0;     // attempts whose registration of the requested pages was spoiled
  int in_flight_waits = 0;  // attempts that met another thread's release under way
  // The Miss of a get of [start, end) by `user_access` (page_end == 0: the
  // range wraps): registered with `extra_access` added, in units of `align`
  // (pages of `page` bytes at least), merging if `allow_merge`.
  static Miss Of(uintptr_t start, uintptr_t end, int user_access, int extra_access, size_t align,
                 size_t page, bool allow_merge) {
    Miss m;
    m.start = start;
    m.end = end;
    m.user_access = user_access;
    m.access = user_access | extra_access;
    // The smallest range ever registered: the request rounded to the region
    // granularity, or to pages if the granularity is coarser.
    const size_t fine = align < page ? align : page;
    m.page_start = AlignDown(start, fine);
    m.page_end = AlignUp(end, fine);
    // Remote rights: the region reaches only requested pages (remote_keys),
    // so alignment coarser than a page does not apply.
    m.remote = (user_access & kAccessRemoteBits) != 0;
    m.plan_start = m.remote ? m.page_start : AlignDown(start, align);
    m.plan_end = m.remote ? m.page_end : AlignUp(end, align);
    if (m.plan_end == 0) m.NarrowToPages();
    m.allow_merge = allow_merge;
    return m;
  }
  // A registrar that accepts at most `limit` bytes (0: any length): alignment
  // that would reach beyond it plans the requested pages instead. (Pages
  // beyond it fail at the registrar, EINVAL naming the limit.)
  void KeepWithin(size_t limit) {
    if (__builtin_expect(limit != 0, 0) && plan_end - plan_start > limit) {
      plan_start = page_start;
      plan_end = page_end;
    }
  }
  // From now on: exactly the requested pages, no merging.
  void NarrowToPages() {
    allow_merge = false;
    plan_start = page_start;
    plan_end = page_end;
  }
};
// One registration made outside the lock for a Miss.
struct Attempt {
  uintptr_t start = 0, end = 0;  // registered (the plan, bridged or not)
  int access = 0;
  bool bridged = false;
  bool widened_range = false;                 // beyond the requested pages
  bool widened = false;                       // beyond the requested pages or rights
  WatchResult watch = WatchResult::kWatched;  // what the monitor found (kWatched: none watches)
  absl::StatusOr<Registration> reg;
  uint64_t register_ticks = 0;  // the registrar call's time (NowTicks units)
  size_t length() const { return end - start; }
};

// The misses registering outside the lock, newest first.
class PendingMisses {
 public:
  // Links p, which may register within [start, end).
  void Link(PendingMiss* p, uintptr_t start, uintptr_t end) {
    p->start = start;
    p->end = end;
    p->next = head_;
    p->prev = nullptr;
    if (head_ != nullptr) head_->prev = p;
    head_ = p;
  }
  void Unlink(PendingMiss* p) {
    // Usually the latest miss to start, at the head.
    if (__builtin_expect(p->prev == nullptr, 1)) {
      head_ = p->next;
    } else {
      p->prev->next = p->next;
    }
    if (p->next != nullptr) p->next->prev = p->prev;
  }
  // Records the change of [start, end) in every pending miss it overlaps.
  void Spoil(uintptr_t start, uintptr_t end) {
    for (PendingMiss* p = head_; p != nullptr; p = p->next) {
      if (p->start < end && start < p->end) p->Record(start, end);
    }
  }

 private:
  PendingMiss* head_ = nullptr;
};

// Without the cache's lock, after `attempt` was spoiled by a release
// (in_flight: still under way): OK to try again (narrowed if widening keeps
// being spoiled), else EAGAIN. Only a release of the requested pages
// themselves can exhaust the attempts; a release in flight is waited for.
__attribute__((cold)) absl::Status RetryAfterSpoil(Miss* miss, const Attempt& attempt,
                                                   bool in_flight);

}  // namespace mrcache

#endif  // MRCACHE_CORE_MISS_H_
