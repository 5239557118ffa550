// cache_impl.h: the cache behind mrcache::Cache and the C API.
//
// Read cache.h first for the semantics. This header states the locking and
// reclamation rules the implementation relies on.
//
// Locks: one reader-writer lock, `mu_`, guards the index, the LRU list, the
// retired list, the list of ThreadCaches and every Region field marked
// "guarded" in region.h. It is never held across a registrar call, a monitor
// Watch/Unwatch, the retire callback, or a Region allocation/deletion.
// Memory-event handlers (OnMemoryRelease) never take it. Every change holds
// it for writing; "under mu_" below means that. Held for reading, it admits
// only the shared locked hit (HitShared), which changes nothing another
// reader reads but the covering hints (seqlocked, covering_hints.h): it
// looks the hints and the index up, counts its reference in a slot of its
// own thread (never in locked_refs), fills its own lookup entry and stamps
// that slot's recency (never the LRU list). Reclaimers write-lock,
// so none runs beside it: a region it finds is in the index and alive, and
// the next reclaimer sees its reference (the lock orders them). Releases may
// wait in the ring undrained (only writers drain); the shared hit answers
// only if none of them overlaps its region (InvalidationRing::
// MayOverlapPending), which is what a drain would have removed.
//
// Validity. A lookup entry (thread_cache.h) answers while its region's slot
// (the entry's `slot`, naming the entry's region) is kLive -- every change
// that removes a region from the index (invalidation, eviction, merge,
// flush) marks the region's slots kRetired first -- and while two counters
// it was filled with are unchanged:
//  - gen_, the cache-wide generation: bumped under mu_ before a batch of
//    quarantined Regions is freed or reused (EndQuarantineBatch), by a fork
//    child, and by a memory event when the ring asks to be drained (invalidation_ring.h:
//    once per quarter of its capacity), so that the threads' next gets
//    drain it;
//  - the release generation of the entry's bucket (release_generations.h): memory events bump, for
//    each of three levels (2 MiB, 128 MiB, 8 GiB buckets, 256 counters per
//    level, an address's bucket being (addr >> shift) mod 256), the counters
//    of every bucket the released range overlaps. An entry uses the finest
//    level at which its *region's* range [start, end) lies in one bucket
//    (no entry is filled for a region that crosses an 8 GiB boundary), so a
//    release that overlaps any part of the region bumps that counter, even
//    one far from the addresses the entry was filled for.
// The entry stores the sum of the two as it was filled; both only grow, so
// the sum is unchanged exactly when both are. A release elsewhere bumps
// other buckets only: it costs the hits nothing (the entry stays valid), and
// it is drained by the next slow path like any other report.
//
// Filling (under mu_, for a region in the index): the cache-wide part is
// drained_gen_, the generation read before the last drain of the ring; the
// release part is the bucket's counter, read *then* the ring is checked
// empty: a memory event pushes before it bumps, so if the read saw a bump
// whose range is still in the ring, the ring is not empty and no entry is
// filled. Hence every release pushed after the drain that overlaps the
// region bumps past the entry's sum.
//
// Reclamation protocol (why a lock-free hit never sees a freed region):
//   hit (owner thread T):  load gen g, release counter c; entry.gen == g + c;
//                          slot names entry.region and is kLive;
//                          slot.count += 1; [fence]; reload slot kLive and
//                          gen == g ? use region : undo.
//   reclaimer (under mu_): remove region from the index, mark the slots
//                          naming it kRetired;
//                          [asymmetric fence: membarrier]; sum the counts.
// (The fence is skipped when no live thread but the reclaimer's own has a
// slot naming the region: no other thread can then hit or put it without
// the lock, since slots are claimed only under it. When no live thread but
// the reclaimer's is attached to the cache at all, an eviction, which takes
// only regions with no reference, kills its victim at once: ThreadList::Alone.)
// Either T sees the mark and backs off without touching the region, or the
// reclaimer sees T's increment and keeps the region (it becomes kInvalid and
// is deregistered after its last put). Lookup entries are only filled under
// mu_, for regions in the index, with a slot naming the region, and no slot
// is claimed for a region that left the index, so every slot naming such a
// region is marked. A removal voids only its own region's entries: the
// others' hits go on without a lock. The hit reads no Region field.
// Address reuse: an entry may outlive its region, naming a freed Region's
// address. A Region is freed only in a batch after a gen_ bump under mu_
// (EndQuarantineBatch); every entry filled before the bump is void after it, and a
// Region allocated at a freed one's address is indexed (and gets entries
// and slots) only after that bump. So an entry's region pointer and its
// slot's, when equal and the entry valid, name the same Region.
// Release counters play no part in reclamation.
//
// Put (owner thread T, lock-free when T's slot holds a reference):
//   slot.count -= 1; [fence]; slot.state != kLive ? recheck under mu_.
// Paired with the reclaimer's [mark kRetired; fence; sum]: either the sum
// sees the decrement, or T sees the mark and rechecks the retired list, so a
// retired region is deregistered at its last put, never later and never
// before. A put never loses a count: the slot is T's own, counts move between
// slots and locked_refs only under mu_ (table resize, orphan folding), and a
// put that finds no live slot of T naming the region takes the locked path.
//
// Slot identity: a region is killed (KillLocked) only under mu_, after it
// left the index and its count reached zero, and every slot naming it is
// marked kDead before the Region is freed. A thread has at most one non-dead
// slot per region, in the set of the region's start (thread_cache.h), which
// is where reclaimers look for it (FindSlot) when they mark and sum. So a
// non-dead slot names a live region, and a pointer compare identifies it
// even when a new Region reuses a freed one's address.
//
// Recency (CLOCK): a fast-path hit, and a shared locked hit, stamps its slot
// with the current tick; a write-locked touch stamps the Region. EvictLocked gives a second chance
// to a region whose latest stamp (its own or any live slot's) is newer than the tick at which it
// was last placed at the LRU head. Stamps of slots that are reclaimed, migrated or orphaned are
// folded into the Region first.
#ifndef MRCACHE_CACHE_IMPL_H_
#define MRCACHE_CACHE_IMPL_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/core/bypass.h"
#include "mrcache/core/covering_hints.h"
#include "mrcache/core/deregistration.h"
#include "mrcache/core/deregistration_queue.h"
#include "mrcache/core/eviction.h"
#include "mrcache/core/interval_tree.h"
#include "mrcache/core/invalidation_ring.h"
#include "mrcache/core/log2_histogram.h"
#include "mrcache/core/miss.h"
#include "mrcache/core/miss_plan.h"
#include "mrcache/core/range.h"
#include "mrcache/core/reclaim.h"
#include "mrcache/core/region.h"
#include "mrcache/core/release_generations.h"
#include "mrcache/core/spare_regions.h"
#include "mrcache/core/thread_cache.h"
#include "mrcache/core/thread_list.h"
#include "mrcache/core/timed_registrar.h"
#include "mrcache/internal/mutex.h"
#include "mrcache/monitors/memory_events.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrcache {

// The miss path's functions between AcquireUncached and the registrar call
// (and the timed deregistration) are inlined into their callers: after a
// system call, every return to a frame made before it is mispredicted, so
// each frame between the miss and the registrar's system call costs the miss
// again. They are defined in cache_impl.cc (or cache_impl-inl.h) and may be
// called only there.
#define MRCACHE_MISS_INLINE inline __attribute__((always_inline))

// Pinned-memory budget (pin_budget.h): a miss plans, under mu_, a region that
// fits the process budget after evicting this cache's unused regions (least
// recently used first, only as many bytes as are missing); merging and
// bridging widen at most to a quarter of the budget (a union that joins other
// requests' bytes to a sixteenth, and only while regions do not keep dying by
// invalidation: AddressChurn), and only while the widened region fits without
// evicting. What is still missing is
// asked of the other caches outside mu_. A registrar refusal lowers the
// budget and evicts only what the request needs, never the whole cache. A
// miss over a quarter of the budget that does not fit beside the pinned
// bytes is registered for itself and released at put (AcquireOversized).
class CacheImpl : public MemoryEventListener,
                  public PinBudget::Member,
                  public DeregistrationQueue::Owner {
 public:
  // `eviction` null: the default policy (MakeDefaultEvictionPolicy).
  static absl::StatusOr<std::unique_ptr<CacheImpl>> Create(
      const Config& config, std::unique_ptr<Registrar> registrar,
      std::unique_ptr<EvictionPolicy> eviction = nullptr);
  ~CacheImpl() override;

  absl::StatusOr<Region*> Acquire(void* addr, size_t length, int access);
  absl::Status Put(Region* region);
  // The same, inlined into their callers, which must be in cache_impl.cc:
  // Cache::Acquire and Cache::Put, so that a hit is one call from the
  // application, and a miss returns through one frame fewer.
  MRCACHE_MISS_INLINE absl::StatusOr<Region*> InlineAcquire(void* addr, size_t length, int access);
  MRCACHE_MISS_INLINE absl::Status InlinePut(Region* region);
  absl::Status Invalidate(void* addr, size_t length);
  absl::Status Flush();
  absl::Status DeviceWrite(Region* region, size_t offset, const void* src, size_t length);
  CacheStats stats();
  // The distributions the live statistics page publishes (stats_page.h).
  // Thread-safe, lock-free; concurrent updates may or may not be included.
  void ReadHistograms(CacheHistogramCounts* out);
  void SetRetireCallback(Cache::RetireCallback callback) {
    dereg_.SetRetireCallback(std::move(callback));
  }

  const Config& config() const { return config_; }
  Registrar& registrar() { return *registrar_; }
  std::string monitor_name() const { return monitor_ ? monitor_->name() : "none"; }
  // Gets answered from the index under mu_ rather than by a lookup entry of
  // the calling thread (a subset of stats().hits): what tests observe to
  // tell a lock-free hit from a locked one.
  uint64_t locked_hits() const {
    return slow_hits_.load(std::memory_order_relaxed) + read_locked_hits();
  }
  // Of those, the gets answered with mu_ held only for reading (HitShared).
  uint64_t read_locked_hits() const;
  // Lines of the calling thread's lookup table for this cache, 0 if it has
  // none yet (thread_cache.h): what tests observe of its adaptive size.
  size_t thread_table_lines() const;

  // MemoryEventListener: hook context (no lock, no allocation, no registrar).
  void OnMemoryRelease(uintptr_t start, uintptr_t end) noexcept override;
  // fork() (fork_guard.h): prepare takes mu_, parent releases it; child
  // releases it and turns the cache into a parent's cache (ECHILD).
  void OnForkPrepare() noexcept override;
  void OnForkParent() noexcept override;
  void OnForkChild() noexcept override;
  // PinBudget::Member: evicts unused regions (LRU first) until `bytes` are
  // released; takes mu_ (the caller holds no lock of this cache).
  size_t ReclaimUnused(size_t bytes) override;
  // DeregistrationQueue::Owner: on the queue's thread, deregisters the
  // killed Regions of `list` as DeregisterNow does (frees them only in a
  // fork child, whose registrar is the parent's).
  void DeregisterQueued(Region* list) override;

 private:
  CacheImpl(const Config& config, std::unique_ptr<Registrar> registrar,
            std::unique_ptr<EvictionPolicy> eviction);
  // The eviction policy's view of references and slot stamps (eviction.h).
  class EvictionUse;

  // ECHILD naming `op` if this is a parent's cache in a fork child (whose
  // registrar must not be called), else OK. Out of line: the put fast path
  // compares the generations itself and calls this only in a child.
  __attribute__((noinline)) absl::Status CheckNotForked(const char* op) const;
  // True in a child forked after this cache was created (by fork(), whose
  // atfork handler raised ForkGeneration(), or by a raw clone that skipped it
  // and only the pid tells).
  bool InForkChild() const;
  // Acquire and Put after their lock-free paths found nothing.
  absl::StatusOr<Region*> AcquireUncached(uintptr_t start, uintptr_t end, size_t length,
                                          int access);
  absl::Status PutLocked(Region* r);
  // Deregisters the retired regions whose last reference is gone.
  void SettleRetired();
  // A get answered from the index with mu_ held for reading (the header
  // comment), or nullptr: nothing covers the request, a release waiting in
  // the ring may overlap the region (only a writer drains it), or the reference would need the
  // region's locked count (all slots of its set count others). Counts the
  // get as a slow hit only when it returns a region.
  Region* HitShared(ThreadCache* tc, const Miss& miss) ABSL_LOCKS_EXCLUDED(mu_);
  // Outside mu_: grows hints_ to wanted_hint_lines_, allocating and freeing
  // outside the lock (GrowHintsNow; no call when it has them already).
  void GrowHints() ABSL_LOCKS_EXCLUDED(mu_) {
    if (wanted_hint_lines_.load(std::memory_order_relaxed) >
        hint_lines_.load(std::memory_order_relaxed)) {
      GrowHintsNow();
    }
  }
  void GrowHintsNow() ABSL_LOCKS_EXCLUDED(mu_);
  // The slow path of a get: under mu_, a covering region or a plan; outside
  // it, the registration; under it again, the region installed, or the
  // attempt discarded (refused or spoiled) and the next one narrowed.
  MRCACHE_MISS_INLINE absl::StatusOr<Region*> AcquireSlow(ThreadCache* tc, uintptr_t start,
                                                          uintptr_t end, int access);
  // The Miss of a get of [start, end) (page_end == 0: the range wraps).
  Miss StartMiss(uintptr_t start, uintptr_t end, int user_access) const {
    // Explicit ODP registers every region on demand; lookups stay keyed by
    // what the caller asked for.
    Miss miss = Miss::Of(start, end, user_access, odp_ == OdpMode::kExplicit ? kAccessOnDemand : 0,
                         align_, page_, config_.max_merge_bytes > 0);
    miss.KeepWithin(max_region_);
    return miss;
  }
  // A region covering the miss's request, handed out (HandOutLocked), or
  // nullptr; counts the get once, as a slow hit or a miss.
  Region* TakeCoveringLocked(ThreadCache* tc, Miss* miss) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the caller a reference to r: the reference, its lookup entry, the
  // LRU touch.
  void HandOutLocked(ThreadCache* tc, Region* r, const Miss& miss)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fits `plan` (planner_'s, under the same hold of mu_) to the budget
  // and links `pending` into pending_; returns FitPlanLocked's shortfall.
  size_t PlanAttemptLocked(Miss* miss, MissPlan* plan, PendingMiss* pending, DeadList* dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Without mu_: bridges, tells the monitor, registers.
  MRCACHE_MISS_INLINE Attempt RegisterOutsideLock(const Miss& miss, const MissPlan& plan);
  // Unlinks `pending` and remembers ranges not worth widening into again.
  MRCACHE_MISS_INLINE void EndAttemptLocked(const MissPlan& plan, const Attempt& attempt,
                                            PendingMiss* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Without mu_, after the registrar refused `attempt`: OK to try again
  // (narrowed, or after making room), else the error for the caller.
  __attribute__((cold)) absl::Status AfterRefusal(Miss* miss, const Attempt& attempt);
  // Makes `fresh` the region of a successful attempt: indexed, on the LRU,
  // replacing the compatible regions it contains, handed to the caller; then
  // evicts down to max_regions and max_bytes.
  // `may_contain` false: no indexed region overlaps the attempt's range (see
  // MissPlan::overlapped), and the index is not searched for any.
  Region* InstallLocked(ThreadCache* tc, const Miss& miss, const Attempt& attempt, Region* fresh,
                        bool may_contain, DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unindexes the compatible regions r contains (r takes over their used
  // bytes); returns them linked by next_dead, for SettleLocked. Sets
  // *overlaps_others if r overlaps an indexed region it does not replace.
  Region* UnindexContainedLocked(Region* r, bool* overlaps_others)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A miss whose registration `attempt` a monitor could not watch
  // (WatchResult::kUnwatchable): a release there might never be reported,
  // so the registration serves this get alone, as a bypass (deregistered at
  // its put), and the watch reference is dropped. Without the lock.
  Region* ServeUnwatched(const Attempt& attempt);
  // Under a pin budget, a miss whose requested pages exceed a quarter of the
  // budget and do not fit beside the pinned bytes is not cached: it would
  // displace a quarter of the cache or more, and LRU would evict it again
  // before a later use unless that use comes soon. It gets a registration of
  // its pages for itself (after evicting unused regions, least recently used
  // first, only until it fits), deregistered at its put and counted as
  // bypassed, so the room goes back to regions that are reused. Second
  // sight: pages served so among the last OversizedSeen::kSeen such misses are
  // cached the next time, so that a large buffer reused soon stays
  // registered. Returns nullptr where the request takes the normal path
  // (no budget, a covering region, room enough, second sight, or a refused
  // registration, which AcquireSlow's retries handle).
  absl::StatusOr<Region*> AcquireOversized(uintptr_t start, uintptr_t end, int access);
  absl::StatusOr<Region*> AcquireImplicitOdp(uintptr_t start, uintptr_t end, int access);
  ThreadCache* AttachThread();
  // Counts a slow-path get of the calling thread (tc's owner) and, at the
  // end of a window, resizes its table to what ThreadCache::EndWindow decides
  // (EndThreadCacheWindow).
  void AdaptThreadCache(ThreadCache* tc) {
    if (tc->CountSlowGet()) EndThreadCacheWindow(tc);
  }
  void EndThreadCacheWindow(ThreadCache* tc);

  // Every *Locked function requires mu_, held exclusively
  // (ABSL_EXCLUSIVE_LOCKS_REQUIRED) unless its annotation is
  // ABSL_SHARED_LOCKS_REQUIRED: then held for reading suffices. Checked by
  // scripts/check_thread_safety.
  // Every writer's first step: advances the tick, drains the invalidation
  // ring, folds orphaned threads' counts, and settles retired regions whose
  // last reference is gone (into `dead`); the last three only when there is
  // something to do (MaintainSlowLocked).
  void MaintainLocked(DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaintainSlowLocked(DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes this cache may pin now: the process budget, or max_bytes if
  // smaller; 0 = no limit (and always 0 for on-demand paging or a registrar
  // that pins nothing).
  size_t PinBudgetBytes() const;
  // The process budget that applies to this cache's pins (0 = none).
  size_t ProcessBudget() const { return budget_ != nullptr ? budget_->budget() : 0; }
  // Fits `plan` into the process budget (MissPlanner::FitToBudget), then
  // evicts this cache's unused regions (EvictBytesLocked) until it fits. Returns the bytes still
  // missing (to ask of the other caches), 0 if it fits or if even the exact
  // pages exceed the budget (they are tried anyway, without evicting).
  size_t FitPlanLocked(MissPlan* plan, uintptr_t exact_start, uintptr_t exact_end, DeadList* dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts unused regions until `bytes` left the index or the policy names
  // none (EvictionPolicy::Goal::kBytes); returns the bytes that left it.
  size_t EvictBytesLocked(size_t bytes, DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Outside mu_: releases about `bytes` of unused regions, this cache's first,
  // then the other caches'; returns the bytes released.
  size_t MakeRoom(size_t bytes);
  // The ENOMEM of a request that did not fit, naming the limit and the bytes
  // pinned and in use, with the registrar's own message.
  __attribute__((cold)) absl::Status OutOfPinnedMemory(uintptr_t start, uintptr_t end,
                                                       const absl::Status& cause);
  // The region covering [start, end) with compatible rights, or nullptr; its
  // range in *span if given, as the index or a covering hint holds it: what
  // the read-locked hit uses instead of reading the Region (at 10^6 regions,
  // a Region is a cache miss).
  Region* FindCoveringLocked(uintptr_t start, uintptr_t end, int access, Range* span = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Counts a reference to r for tc: in tc's slot for r (returned), or in
  // r->locked_refs if all of its set count references (nullptr).
  ThreadCache::Line* TakeRefLocked(ThreadCache* tc, Region* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for a region just installed, which no slot names yet (a slot
  // that is not kDead names a live region, and r was not one: thread_cache.h),
  // so no search for one.
  // Inline: the miss's install calls it.
  ThreadCache::Line* TakeFirstRefLocked(ThreadCache* tc, Region* r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ThreadCache::Line* slot = tc->ClaimSlot(r, r->start, region_frees_);
    return slot != nullptr ? slot : CountRefInRegionLocked(tc, r);
  }
  // Their fallback when every slot of r's set counts references: the
  // reference goes to r->locked_refs; returns nullptr (no slot).
  ThreadCache::Line* CountRefInRegionLocked(ThreadCache* tc, Region* r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++tc->window_displaced;
    ++r->locked_refs;  // every slot of the set counts another live region of ours
    return nullptr;
  }
  // Fills tc's lookup entry for a get of [start, end) answered by r, whose
  // range is `span` and whose slot of tc is `slot` (nullptr: none, and no
  // entry). Reads no field of r.
  void FillLookupLocked(ThreadCache* tc, uintptr_t start, uintptr_t end, int access, Region* r,
                        Range span, ThreadCache::Line* slot) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A write-locked use of r: its stamp, and the policy told.
  void TouchLocked(Region* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sum of r's locked and per-thread counts (ThreadList::TotalRefs).
  int64_t TotalRefsLocked(const Region* r, uint64_t* last_use = nullptr) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return threads_.TotalRefs(r, last_use);
  }
  // Removes r from the index, its hints and the eviction policy (state
  // kInvalid); its slots are untouched.
  MRCACHE_MISS_INLINE void DetachLocked(Region* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes r from the index and LRU (DetachLocked) and retires it onto
  // `candidates` (Reclaim::Retire), for SettleLocked.
  void UnindexLocked(Region* r, Region** candidates) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reclaim::Settle, Kill and RecheckRetired, with mu_ held for writing.
  void SettleLocked(Region* candidates, DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reclaim_.Settle(candidates, dead);
  }
  void KillLocked(Region* r, DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reclaim_.Kill(r, dead);
  }
  void RecheckRetiredLocked(DeadList* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reclaim_.RecheckRetired(dead);
  }
  // Takes the regions [start, end) voids out of the index (onto
  // *candidates), marked with `why`.
  void InvalidateRangeLocked(uintptr_t start, uintptr_t end, Invalidation why, Region** candidates)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SpoilPendingLocked(uintptr_t start, uintptr_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts the unused regions eviction_ names while `over()` holds (or
  // until it names none).
  template <typename Pred>
  void EvictLocked(Pred over, DeadList* dead,
                   EvictionPolicy::Goal goal = EvictionPolicy::Goal::kRegions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a miss that found no covering region and whose attempt would
  // register `plan` (MissPlanner::Plan) is served by a registration of its own:
  // the cache is full by count, the pin budget has room for the pages, the
  // plan is exactly the requested pages, and the policy does not admit them
  // (EvictionPolicy::AdmitsToFullCache). Inline, the usual answers first: a
  // cache not full by count, or whose policy admits every miss, weighs
  // nothing else on its miss (NotAdmittedByPolicyLocked weighs the rest).
  MRCACHE_MISS_INLINE bool NotAdmittedLocked(const Miss& miss, const MissPlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NotAdmittedByPolicyLocked(const Miss& miss, const MissPlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if the index and the regions agree: every indexed region is
  // cached, this cache's, at the range the index holds; cached_bytes_ and
  // overlapping_regions_ count them; every retired region is kInvalid.
  // O(regions): for MRCACHE_DCHECK.
  bool IndexAgreesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Bumps gen_ (voiding every lookup entry) and fences unless no other live
  // thread is attached.
  void BumpGenerationAndFence() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Outside mu_: dereg_'s Deregister and DeregisterNow (deregistration.h),
  // ending its quarantine batches with EndQuarantineBatch.
  void Deregister(DeadList* dead) {
    dereg_.Deregister(dead, [this](Region* batch) { EndQuarantineBatch(batch); });
  }
  void DeregisterNow(DeadList* dead) {
    dereg_.DeregisterNow(dead, [this](Region* batch) { EndQuarantineBatch(batch); });
  }
  // Outside mu_: a batch of deregistered Regions left quarantine. Bumps the
  // generation (voiding every lookup entry filled before, so that none names
  // a Region of the batch when its memory is reused) and keeps the batch in
  // spares_ or frees it.
  void EndQuarantineBatch(Region* batch) ABSL_LOCKS_EXCLUDED(mu_);
  // What timed_ uses and records into (with budget_ as it is now).
  TimedRegistrar::Setup TimedRegistrarSetup();
  // What dereg_ uses, with `lane` (null: async_dereg off).
  Deregistration::Setup DeregistrationSetup(DeregistrationQueue::Lane* lane);
  // At a miss's start: its start in NowTicks() units if the miss is one
  // of the sample put in miss_ns, get_bytes and register_ns
  // (log2_histogram.h, kHistogramSampleEvery), else 0 (no clock read).
  MRCACHE_MISS_INLINE uint64_t StartMissTiming() const;
  // A get that missed and was served by a bypass or another thread's
  // region: if sampled (`t0`, StartMissTiming, is not 0), its requested
  // bytes and its latency since t0, into histograms_.
  void CountServedMiss(uint64_t t0, size_t requested);
  // A miss that installed `attempt`'s region: if sampled (t0 not 0), its
  // requested bytes, its latency since t0 and its registration's time,
  // into locked_histograms_ (plain adds: the miss holds mu_ anyway).
  MRCACHE_MISS_INLINE void CountInstalledMissLocked(const Attempt& attempt, uint64_t t0,
                                                    size_t requested)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sampled cases' recording, out of line and cold: the misses and
  // registrations that are not sampled carry none of its code.
  __attribute__((noinline, cold)) void CountSampledInstallLocked(const Attempt& attempt,
                                                                 uint64_t t0, size_t requested)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  __attribute__((noinline, cold)) void CountRegionBytesLocked(size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Nanoseconds since t0 (NowTicks() units), 0 if the counter reads behind.
  uint64_t SampledMissNs(uint64_t t0) const;

  const Config config_;
  std::unique_ptr<Registrar> registrar_;
  std::unique_ptr<MonitorLease> monitor_;
  const uint64_t uid_;
  const size_t align_;
  const size_t page_;
  const pid_t pid_;
  // ForkGeneration() at creation (fork_guard.h): a different value now means
  // this is a fork child's copy of the cache (see InForkChild).
  const uint64_t fork_generation_;
  // Whether registrar time is counted in TSC ticks (tick_clock.h).
  const bool tsc_ticks_;
  // Nanoseconds per NowTicks() tick (NsPerTick), for the sampled figures.
  const double ns_per_tick_;
  bool listening_ = false;
  OdpMode odp_ = OdpMode::kOff;
  bool watch_ranges_ = false;        // monitor_->watches_ranges(): Watch/Unwatch do something
  bool monitor_incomplete_ = false;  // auto's coverage is not all in effect (stats)
  // registrar_->max_region_bytes(), 0 = none: no plan, merged, bridged or
  // aligned, registers more (MissPlanner, Miss::KeepWithin).
  size_t max_region_ = 0;
  // The process's pin budget, joined at creation; null when regions pin
  // nothing (on-demand paging, or a registrar whose pins_memory() is false).
  PinBudget* budget_ = nullptr;

  // Hit-path shared state: read-mostly.
  alignas(64) std::atomic<uint64_t> gen_{1};
  std::atomic<uint64_t> tick_{1};
  // The most lines a thread's table grows to: about two per cached region
  // (a power of two, at most ThreadCache::kMaxLines).
  std::atomic<size_t> wanted_thread_lines_{ThreadCache::kMinLines};

  // Release generations (hit path: read-mostly; memory events write them).
  ReleaseGenerations release_gens_;

  InvalidationRing ring_;

  mutable SharedMutex mu_;
  // The reader slot of mu_ the next attached thread reads in (AttachThread).
  std::atomic<uint32_t> next_reader_slot_{0};
  IntervalTree<Region*> index_ ABSL_GUARDED_BY(mu_);
  // Recent answers of index_ (covering_hints.h), each valid while its
  // region is in index_: every removal voids the region's hints
  // (UnindexLocked). hint_lines_ mirrors hints_.lines() for GrowHints;
  // wanted_hint_lines_ is what the largest index so far asked for
  // (CoveringHints::LinesFor, raised by InstallLocked), as
  // wanted_thread_lines_ is for the thread tables.
  CoveringHints hints_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> hint_lines_{0};
  std::atomic<size_t> wanted_hint_lines_{0};
  // Which cached region an eviction takes, and admission (eviction.h): it
  // orders exactly the regions in index_.
  const std::unique_ptr<EvictionPolicy> eviction_ ABSL_PT_GUARDED_BY(mu_);
  // eviction_ if it is the default policy, else null (see WithPolicy).
  ClockEviction* const clock_ ABSL_PT_GUARDED_BY(mu_);
  // call(policy) on eviction_: on clock_ when set, so that the default
  // policy's calls on the miss path are direct and inlined, not virtual.
  template <typename Call>
  MRCACHE_MISS_INLINE auto WithPolicy(Call call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return clock_ != nullptr ? call(*clock_) : call(*eviction_);
  }
  // The attached threads (their slots, hit counters and orphans), and
  // reclamation (the retired list), which reads and marks their slots.
  ThreadList threads_ ABSL_GUARDED_BY(mu_){uid_};
  Reclaim reclaim_ ABSL_GUARDED_BY(mu_){&threads_};
  PendingMisses pending_ ABSL_GUARDED_BY(mu_);
  // What a miss registers (merging, bridging, the budget's bounds), and
  // where widening did not pay lately.
  MissPlanner planner_ ABSL_GUARDED_BY(mu_);
  // AcquireOversized's last pages served uncached (second sight).
  OversizedSeen oversized_seen_ ABSL_GUARDED_BY(mu_);
  // The generation read before the last drain of ring_ (MaintainLocked),
  // raised by this cache's own bumps that no report raced with. A lookup
  // entry is filled with it, never with a later generation: a release pushed
  // after the drain then voids the entry.
  uint64_t drained_gen_ ABSL_GUARDED_BY(mu_) = 0;
  // The most releases waiting in the ring that a shared hit checks for
  // overlap with its region before it leaves the get to a writer.
  static constexpr uint64_t kPendingScan = 8;
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of regions in the index
  // Regions in the index with overlaps_others set. Invariant: while it is 0,
  // no two indexed regions overlap (of two that do, the later one was
  // installed over the other), so at most one region holds any address.
  size_t overlapping_regions_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches of Regions whose quarantine ended so far: a Region named under
  // mu_ by a slot that is not dead cannot be freed before this changes
  // (ThreadCache::displaced).
  uint64_t region_frees_ ABSL_GUARDED_BY(mu_) = 0;
  // Regions whose quarantine ended, for misses to reuse (taken under the
  // miss's first hold of mu_).
  SpareRegions spares_ ABSL_GUARDED_BY(mu_);
  // Regions put into the index so far (InstallLocked, the only place that
  // does): a miss that saw no covering region and no install since needs no
  // second look for one another thread registered meanwhile.
  uint64_t installs_ ABSL_GUARDED_BY(mu_) = 0;

  // Counters (slow paths; relaxed atomics so stats() needs no lock for them;
  // read-locked hits are counted per thread instead, see ThreadCache).
  std::atomic<uint64_t> slow_hits_{0}, misses_{0}, evictions_{0}, invalidations_{0}, merges_{0},
      registrar_failures_{0};
  // The registrar's calls, timed, and the registrations, deregistrations
  // and pinned bytes they count.
  TimedRegistrar timed_;
  // Distributions (ReadHistograms sums both sets): what happens outside
  // mu_ (deregistrations, bypass registrations, refused, spoiled or raced
  // attempts) in relaxed atomics; what an installing miss records while it
  // holds mu_ anyway, in plain counters mu_ guards.
  struct Histograms {
    Log2Histogram region_bytes, miss_ns, register_ns, deregister_ns, get_bytes;
  } histograms_;
  struct LockedHistograms {
    PlainLog2Histogram region_bytes, miss_ns, register_ns, get_bytes;
  } locked_histograms_ ABSL_GUARDED_BY(mu_);
  // The gets served by registrations of their own (bypass.h), and
  // odp=implicit's whole-address-space regions.
  Bypass bypass_;
  // Deregistration of the killed regions, their quarantine, the retire
  // callback and this cache's lane of the deregistration queue.
  Deregistration dereg_;
};

}  // namespace mrcache

#endif  // MRCACHE_CACHE_IMPL_H_
