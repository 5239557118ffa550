// locked_hit.cc: the gets the index answers under mu_ -- the read-locked
// hit (HitShared), the write-locked one of a miss's first look
// (TakeCoveringLocked) -- and how such a get is handed its region: a
// reference counted in a slot of the thread's own (ThreadCache::TakeSlotRef)
// or in the region's locked count, a lookup entry for the next get, and the
// recency touch; and the growth of the covering hints the index lookup reads
// first (GrowHintsNow). The protocol these follow is stated in cache_impl.h. Nothing
// here calls the rest of CacheImpl: the miss (cache_impl.cc) calls these.
#include "mrcache/core/cache_impl.h"

namespace mrcache {

void CacheImpl::GrowHintsNow() {
  const size_t want = wanted_hint_lines_.load(std::memory_order_relaxed);
  CoveringHints fresh(want);  // outside the lock
  {
    MutexLock lock(&mu_);
    if (hints_.lines() >= want) return;  // another thread grew it
    hints_.Swap(&fresh);
    hint_lines_.store(want, std::memory_order_relaxed);
  }
}  // `fresh` now holds the old table and frees it here, unlocked.

Region* CacheImpl::HitShared(ThreadCache* tc, const Miss& miss) {
  ReaderMutexLock lock(&mu_, tc->reader_slot);
  Range span;
  Region* hit = FindCoveringLocked(miss.start, miss.end, miss.access, &span);
  if (hit == nullptr) return nullptr;
  // A writer drains the ring before it looks; a reader cannot, and a
  // release waiting there that overlaps the region may void it. Releases
  // elsewhere (another thread's buffers) do not: their writer drains them.
  if (ring_.MayOverlapPending(span.start, span.end, kPendingScan)) return nullptr;
  ThreadCache::Line* slot = tc->TakeSlotRef(hit, span.start, region_frees_);
  if (slot == nullptr) return nullptr;
  // The put finds its slot without reading the Region (OwnSlot).
  tc->last_region = hit;
  tc->last_slot = slot;
  FillLookupLocked(tc, miss.start, miss.end, miss.user_access, hit, span, slot);
  // The CLOCK touch, on our slot as a lock-free hit's (EvictLocked reads
  // both): the region gets its second chance, and the hit reads no Region.
  slot->ref_last_use.store(tick_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  ThreadCache::OwnerAdd(tc->read_locked_hits, 1);
  tc->CountLockedHit();
  return hit;
}

Region* CacheImpl::TakeCoveringLocked(ThreadCache* tc, Miss* miss) {
  Region* hit = FindCoveringLocked(miss->start, miss->end, miss->access);
  tc->slow_hit_expected = hit != nullptr;
  // Usually a miss: the hits a thread expects go to HitShared first.
  if (__builtin_expect(hit == nullptr, 1)) {
    // One get, one count: a retry was counted already.
    if (__builtin_expect(!miss->counted, 1)) misses_.fetch_add(1, std::memory_order_relaxed);
    miss->counted = true;
    return nullptr;
  }
  HandOutLocked(tc, hit, *miss);
  if (!miss->counted) slow_hits_.fetch_add(1, std::memory_order_relaxed);
  tc->CountLockedHit();
  miss->counted = true;
  return hit;
}

void CacheImpl::HandOutLocked(ThreadCache* tc, Region* r, const Miss& miss) {
  ThreadCache::Line* slot = TakeRefLocked(tc, r);
  FillLookupLocked(tc, miss.start, miss.end, miss.user_access, r, Range{r->start, r->end}, slot);
  TouchLocked(r);
}

Region* CacheImpl::FindCoveringLocked(uintptr_t start, uintptr_t end, int access, Range* span) {
  Range unused;
  if (span == nullptr) span = &unused;
  // First the hint of the last get that started on this page, if its region
  // is still in the index (covering_hints.h).
  if (Region* hinted = hints_.Find(start, end, access, &span->start, &span->end)) {
    return hinted;
  }
  // Most indexes hold no overlapping regions, and then only the region that
  // starts last at or before `start` can cover the request: one descent,
  // about half the nodes the overlap search reads (it checks each sibling's
  // max_end), and for a miss the only one. With overlapping regions (other
  // rights, a merge's neighbours) a request that one of them does not cover
  // takes the full search.
  uintptr_t s = 0, e = 0;
  Region* last = nullptr;
  if (index_.FindLastStartingAtOrBefore(start, &s, &e, &last) && end <= e &&
      AccessCompatible(last->reg.access, access)) {
    hints_.Fill(start, last);
    *span = Range{s, e};
    return last;
  }
  if (overlapping_regions_ == 0) return nullptr;
  Region* found = nullptr;
  index_.FindCovering(start, end, [access, &found](uintptr_t, uintptr_t, Region* r) {
    if (!AccessCompatible(r->reg.access, access)) return false;
    found = r;
    return true;
  });
  if (found != nullptr) {
    hints_.Fill(start, found);
    *span = Range{found->start, found->end};
  }
  return found;
}

ThreadCache::Line* CacheImpl::TakeRefLocked(ThreadCache* tc, Region* r) {
  ThreadCache::Line* slot = tc->TakeSlotRef(r, r->start, region_frees_);
  return slot != nullptr ? slot : CountRefInRegionLocked(tc, r);
}

void CacheImpl::FillLookupLocked(ThreadCache* tc, uintptr_t start, uintptr_t end, int access,
                                 Region* r, Range span, ThreadCache::Line* slot) {
  // The entry holds the region's range (so a later get of any part of it
  // hits) and sits in the set of the requested start; entries of that set
  // that cover the request go first.
  tc->ClearEntriesCovering(start, end, access);
  // Without a slot of ours (all of its set count references) a hit could
  // not count its reference: no entry.
  const int level = ReleaseGenerations::LevelOf(span.start, span.end);
  if (slot == nullptr || level == ReleaseGenerations::kLevels) return;
  uint64_t released = release_gens_.Counter(level, span.start).load(std::memory_order_acquire);
  // After reading the counter: a release pushed since the drain may overlap
  // r and be counted in `released` already (cache_impl.h). Then, and for a
  // region no bucket holds, leave the entry out. (A release bumps after it
  // pushes, and only a writer drains: one counted here is still waiting.)
  if (ring_.MayOverlapPending(span.start, span.end, kPendingScan)) return;
  const uint64_t gen = gen_.load(std::memory_order_relaxed);
  ThreadCache::Line* e = tc->EntryLine(start, slot, [this, gen](const ThreadCache::Line& line) {
    return line.gen != gen + release_gens_.Counter(line.release_level, line.start)
                                 .load(std::memory_order_relaxed);
  });
  e->gen = drained_gen_ + released;
  e->release_level = static_cast<uint8_t>(level);
  e->start = span.start;
  e->end = span.end;
  e->access = access;
  e->region = r;
  e->slot = static_cast<uint16_t>(slot - tc->lines);
}

void CacheImpl::TouchLocked(Region* r) {
  if (r->state != RegionState::kCached) return;
  const uint64_t tick = tick_.load(std::memory_order_relaxed);
  r->last_use.store(tick, std::memory_order_relaxed);
  WithPolicy([r, tick](auto& policy) { policy.Touched(r, tick); });
}

}  // namespace mrcache
