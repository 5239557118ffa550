// cache_impl.cc: CacheImpl. The protocol is stated in cache_impl.h.
#include "mrcache/core/cache_impl.h"

#include <cerrno>
#include <utility>

#include "mrcache/core/bypass.h"
#include "mrcache/core/cache_impl-inl.h"
#include "mrcache/core/dcheck.h"
#include "mrcache/core/fences.h"
#include "mrcache/core/hashed_address.h"
#include "mrcache/core/range.h"
#include "mrcache/core/tick_clock.h"
#include "mrcache/core/voided_regions.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/registrars/odp.h"

namespace mrcache {

class CacheImpl::EvictionUse final : public EvictionPolicy::Use {
 public:
  explicit EvictionUse(const CacheImpl* cache) : cache_(cache) {}
  bool UnusedSincePlaced(const Region* r) override {
    cache_->mu_.AssertHeld();  // made by EvictLocked, under mu_
    uint64_t used = 0;
    return cache_->TotalRefsLocked(r, &used) == 0 && used <= r->lru_stamp;
  }

 private:
  const CacheImpl* cache_;
};

// ---- get --------------------------------------------------------------------

absl::StatusOr<Region*> CacheImpl::Acquire(void* addr, size_t length, int access) {
  return InlineAcquire(addr, length, access);
}

// Out of line, so that the hit path above needs no stack frame of its own.
__attribute__((noinline)) absl::StatusOr<Region*> CacheImpl::AcquireUncached(uintptr_t start,
                                                                             uintptr_t end,
                                                                             size_t length,
                                                                             int access) {
  if (length == 0) return ErrnoStatus(EINVAL, "mrc_get: length is 0");
  if (end < start) return ErrnoStatus(EINVAL, "mrc_get: addr + length overflows");
  if (__builtin_expect(!AccessValid(access), 0)) return ValidateAccess(access);
  if (__builtin_expect(ForkGeneration() != fork_generation_, 0)) return CheckNotForked("mrc_get");
  if (access & (kAccessMwBind | kAccessZeroBased)) return bypass_.Acquire(start, end, access);
  if ((access & kAccessRemoteBits) && config_.remote_keys == RemoteKeys::kPrivate) {
    // An rkey of exactly the requested bytes, revoked at put (cache.h).
    const int odp = odp_ == OdpMode::kExplicit || odp_ == OdpMode::kImplicit ? kAccessOnDemand : 0;
    return bypass_.Acquire(start, end, access | odp, Bypass::Kind::kRemotePrivate);
  }
  if (odp_ == OdpMode::kImplicit) return AcquireImplicitOdp(start, end, access);
  if (budget_ != nullptr) {
    absl::StatusOr<Region*> oversized = AcquireOversized(start, end, access);
    if (!oversized.ok() || *oversized != nullptr) return oversized;
  }
  ThreadCache* tc = FindThreadCache(uid_);
  if (tc == nullptr) tc = AttachThread();
  return AcquireSlow(tc, start, end, access);
}

absl::StatusOr<Region*> CacheImpl::AcquireOversized(uintptr_t start, uintptr_t end, int access) {
  const size_t budget = ProcessBudget();
  const uintptr_t page_start = AlignDown(start, page_);
  const uintptr_t page_end = AlignUp(end, page_);
  if (budget == 0 || page_end == 0) return nullptr;
  const size_t need = page_end - page_start;
  // Beyond the budget itself: AcquireSlow tries it and explains a refusal.
  if (need <= budget / 4 || need > budget) return nullptr;
  size_t missing = 0;
  {
    MutexLock lock(&mu_);
    // Any covering region (even one an undrained invalidation voids) sends
    // the request down the normal path, which drains first.
    if (FindCoveringLocked(start, end, access) != nullptr) return nullptr;
    const size_t pinned = budget_->pinned();
    if (pinned + need <= budget) return nullptr;  // caching it evicts nothing
    if (oversized_seen_.SeenAgain(Range{page_start, page_end})) return nullptr;
    missing = pinned + need - budget;
  }
  MakeRoom(missing);
  absl::StatusOr<Region*> r =
      bypass_.Acquire(page_start, page_end, access, Bypass::Kind::kOversized);
  if (!r.ok()) {
    const int err = StatusToErrno(r.status());
    if (err == ENOMEM || err == EAGAIN) return nullptr;
    return r;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

void CacheImpl::EndThreadCacheWindow(ThreadCache* tc) {
  const size_t want = tc->EndWindow(tick_.load(std::memory_order_relaxed),
                                    wanted_thread_lines_.load(std::memory_order_relaxed));
  if (want == tc->mask + 1) return;
  ThreadCache fresh(want);  // allocated outside the lock
  {
    MutexLock lock(&mu_);
    tc->MoveSlotsInto(&fresh);
  }
}  // `fresh` now holds the old table and frees it here, unlocked.

ThreadCache* CacheImpl::AttachThread() {
  auto* tc = new ThreadCache(ThreadCache::kMinLines);  // outside mu_; grows with use
  tc->cache_uid = uid_;
  tc->cache = this;
  tc->reader_slot = static_cast<int>(next_reader_slot_.fetch_add(1, std::memory_order_relaxed));
  {
    MutexLock lock(&mu_);
    threads_.Attach(tc);
  }
  InstallThreadCache(tc);
  return tc;
}

absl::StatusOr<Region*> CacheImpl::AcquireSlow(ThreadCache* tc, uintptr_t start, uintptr_t end,
                                               int user_access) {
  Miss miss = StartMiss(start, end, user_access);
  if (miss.page_end == 0) return ErrnoStatus(EINVAL, "mrc_get: range wraps the address space");
  AdaptThreadCache(tc);
  GrowHints();
  if (tc->slow_hit_expected) {
    if (Region* hit = HitShared(tc, miss)) return hit;
  }
  const uint64_t miss_t0 = StartMissTiming();
  bool may_bypass = true;  // until a registration of its own is refused
  for (;;) {
    DeadList dead;
    PendingMiss pending;
    MissPlan plan;
    // Whatever a miss needs under the lock is allocated outside it: a
    // spare Region is taken under the first hold, and made new (or one
    // allocated, with its index node) before the second.
    Region* fresh = nullptr;
    auto discard = [&] {
      delete fresh;
      Deregister(&dead);
    };
    size_t shortfall = 0;        // bytes the budget lacks after evicting our unused regions
    uint64_t installs_seen = 0;  // while no region covered the request
    {
      MutexLock lock(&mu_);
      MaintainLocked(&dead);
      if (Region* hit = TakeCoveringLocked(tc, &miss)) {
        lock.Unlock();
        discard();
        return hit;
      }
      plan = planner_.Plan(index_, miss);
      if (may_bypass && NotAdmittedLocked(miss, plan)) {
        lock.Unlock();
        discard();
        absl::StatusOr<Region*> own = bypass_.Acquire(miss.page_start, miss.page_end, miss.access,
                                                      Bypass::Kind::kNotAdmitted);
        const int err = own.ok() ? 0 : StatusToErrno(own.status());
        if (err == 0) CountServedMiss(miss_t0, end - start);
        if (err != ENOMEM && err != EAGAIN) return own;
        may_bypass = false;  // the normal path makes room and retries
        continue;
      }
      installs_seen = installs_;
      shortfall = PlanAttemptLocked(&miss, &plan, &pending, &dead);
      fresh = spares_.Take();
    }
    fresh = SpareRegions::Reuse(fresh);
    dereg_.DeregisterBeforeRegistering(&dead, plan.end - plan.start,
                                       [this](Region* batch) { EndQuarantineBatch(batch); });
    if (shortfall > 0) budget_->ReclaimOthers(this, shortfall);

    Attempt attempt = RegisterOutsideLock(miss, plan);

    MutexLock lock(&mu_);
    MaintainLocked(&dead);  // drains invalidations that arrived meanwhile
    EndAttemptLocked(plan, attempt, &pending);
    if (!attempt.reg.ok()) {
      lock.Unlock();
      histograms_.register_ns.Add(TicksToNs(attempt.register_ticks));
      if (watch_ranges_)
        monitor_->Unwatch(reinterpret_cast<void*>(attempt.start), attempt.length());
      discard();
      absl::Status refused = AfterRefusal(&miss, attempt);
      if (!refused.ok()) return refused;
      continue;
    }
    // Spoiled: an invalidation overlapped what we registered while we did,
    // or a fenced release of it is still under way (memory_events.h: its
    // report after the call has not been made yet, so nothing could void a
    // registration of pages that are about to change).
    const bool changed =
        pending.Spoils(attempt.start, attempt.end) || attempt.watch == WatchResult::kUnmapped;
    const bool in_flight = !changed && ReleaseInFlight(attempt.start, attempt.end);
    // Only an install can make a region cover the request: without one since
    // the look above, no other thread raced us to it.
    Region* raced = changed || in_flight || installs_ == installs_seen
                        ? nullptr
                        : FindCoveringLocked(start, end, miss.access);
    if (__builtin_expect(attempt.watch == WatchResult::kUnwatchable, 0) && raced == nullptr &&
        !changed && !in_flight) {
      lock.Unlock();
      discard();
      histograms_.register_ns.Add(TicksToNs(attempt.register_ticks));
      CountServedMiss(miss_t0, end - start);
      return ServeUnwatched(attempt);
    }
    if (raced == nullptr && !changed && !in_flight) {
      const bool may_contain = plan.overlapped || attempt.start < plan.start ||
                               attempt.end > plan.end || installs_ != installs_seen;
      Region* r = InstallLocked(tc, miss, attempt, fresh, may_contain, &dead);
      CountInstalledMissLocked(attempt, miss_t0, end - start);
      lock.Unlock();
      Deregister(&dead);
      // Prefetching is opt-in (odp_prefetch_bytes, explicit ODP only).
      if (__builtin_expect(odp_ == OdpMode::kExplicit, 0) && config_.odp_prefetch_bytes &&
          end - start >= config_.odp_prefetch_bytes) {
        // Fault the range in now rather than on the device's first access; a
        // failed prefetch only costs the device a fault later.
        (void)registrar_->Prefetch(r->reg, reinterpret_cast<void*>(start), end - start);
      }
      return r;
    }
    // The memory changed while we registered (discard and retry), or
    // another thread registered a covering region (use it).
    if (raced != nullptr) HandOutLocked(tc, raced, miss);
    lock.Unlock();
    histograms_.register_ns.Add(TicksToNs(attempt.register_ticks));
    timed_.CountRegistration(attempt.reg->length);
    timed_.Deregister(*attempt.reg);
    if (watch_ranges_) monitor_->Unwatch(reinterpret_cast<void*>(attempt.start), attempt.length());
    discard();
    if (raced != nullptr) {
      CountServedMiss(miss_t0, end - start);
      return raced;
    }
    absl::Status spoiled = RetryAfterSpoil(&miss, attempt, in_flight);
    if (!spoiled.ok()) return spoiled;
  }
}

size_t CacheImpl::PlanAttemptLocked(Miss* miss, MissPlan* plan, PendingMiss* pending,
                                    DeadList* dead) {
  // Without a budget (a privileged process) every plan fits.
  const size_t shortfall =
      budget_ != nullptr ? FitPlanLocked(plan, miss->page_start, miss->page_end, dead) : 0;
  // A pending miss records every change to what it may register; once the
  // registered range is known, only changes that overlap it spoil it.
  pending_.Link(
      pending,
      plan->has_block() && plan->block_start < plan->start ? plan->block_start : plan->start,
      plan->has_block() && plan->block_end > plan->end ? plan->block_end : plan->end);
  return shortfall;
}

Attempt CacheImpl::RegisterOutsideLock(const Miss& miss, const MissPlan& plan) {
  uintptr_t start = plan.start, end = plan.end;
  int access = miss.access | plan.local;
  const bool bridged = plan.has_block() && BridgeOverResidentMemory(plan, page_, &start, &end);
  if (bridged) access |= plan.bridge_local;
  // Bitwise, without branches: GCC would otherwise lay out the unwidened
  // case, the usual one, as a jump away and back.
  const bool widened_range = (start != miss.page_start) | (end != miss.page_end);
  const bool widened = widened_range | (access != miss.access);
  // Monitors that watch ranges learn of the registration first, so an unmap
  // during it is reported. A range that was not all mapped when the monitor
  // looked may have been replaced since, unseen: such a registration is
  // spoiled like one an invalidation overlapped. One a monitor cannot watch
  // at all serves its get alone (ServeUnwatched).
  const WatchResult watch = watch_ranges_
                                ? monitor_->Watch(reinterpret_cast<void*>(start), end - start)
                                : WatchResult::kWatched;
  // `reg` constructed from the registrar's answer rather than assigned: the
  // assignment's out-of-line path cost every miss two taken jumps.
  uint64_t ticks = 0;
  return Attempt{start,         end,     access, bridged,
                 widened_range, widened, watch,  timed_.Register(start, end, access, &ticks),
                 ticks};
}

void CacheImpl::EndAttemptLocked(const MissPlan& plan, const Attempt& attempt,
                                 PendingMiss* pending) {
  // Only a plan with a bridge block can have bridged; most have none.
  if (__builtin_expect(plan.has_block(), 0)) {
    if (!attempt.bridged) {
      // Nothing resident to bridge here: do not look again on every miss.
      // (Merging does not consult this: only invalidations cool it.)
      planner_.BridgeFailed(plan.block_start, plan.block_end);
    } else if (!attempt.reg.ok()) {
      // Memory that cannot be registered: do not widen into it again soon.
      const int err = StatusToErrno(attempt.reg.status());
      if (err == EFAULT || err == EINVAL) planner_.BridgeFailed(attempt.start, attempt.end);
    }
  }
  pending_.Unlink(pending);
}

absl::Status CacheImpl::AfterRefusal(Miss* miss, const Attempt& attempt) {
  const int err = StatusToErrno(attempt.reg.status());
  const bool out_of_memory = err == ENOMEM || err == EAGAIN;
  if (out_of_memory && ++miss->memory_refusals <= 3) {
    // Out of resources. Below the RLIMIT_MEMLOCK budget, something else
    // pins too: the budget comes down to what was pinned then, and the next
    // plan fits it by evicting LRU. Then the requested pages alone; for
    // those, only as many unused bytes as they need are evicted (never the
    // whole cache), and one refusal is always retried.
    const size_t need = attempt.length();
    bool hopeless = false;
    // Without a budget: room for the request.
    const size_t to_free = budget_ != nullptr ? budget_->RoomAfterRefusal(need, &hopeless) : need;
    if (!hopeless) {
      if (attempt.widened) {
        miss->NarrowToPages();
        return absl::OkStatus();
      }
      if (MakeRoom(to_free) > 0 || miss->memory_refusals == 1) return absl::OkStatus();
    }
  }
  if (out_of_memory) {
    registrar_failures_.fetch_add(1, std::memory_order_relaxed);
    return OutOfPinnedMemory(attempt.start, attempt.end, attempt.reg.status());
  }
  if ((err == EFAULT || err == EINVAL) && attempt.widened) {
    // Alignment or a merge reached memory that cannot be registered, or a
    // size the registrar refuses: fall back to exactly the requested pages.
    miss->NarrowToPages();
    return absl::OkStatus();
  }
  registrar_failures_.fetch_add(1, std::memory_order_relaxed);
  return attempt.reg.status();
}

Region* CacheImpl::InstallLocked(ThreadCache* tc, const Miss& miss, const Attempt& attempt,
                                 Region* fresh, bool may_contain, DeadList* dead) {
  Region* r = fresh;
  r->start = attempt.start;
  r->end = attempt.end;
  r->reg = *attempt.reg;
  r->cache = this;
  // Alignment coarser than a page, or bridging, adds whole pages that no
  // request touched; then the region counts as used everywhere.
  const bool whole = attempt.bridged | ((align_ > page_) & !miss.remote);
  r->used_start = whole ? r->start : miss.start;
  r->used_end = whole ? r->end : miss.end;
  const uint64_t tick = tick_.load(std::memory_order_relaxed);
  r->last_use.store(tick, std::memory_order_relaxed);
  index_.InsertNode(&r->index_node, r->start, r->end, r);
  ++installs_;
  cached_bytes_ += r->length();
  // The tables sized by the index grow only when it outgrows them: rarely.
  const size_t slots = wanted_thread_lines_.load(std::memory_order_relaxed);
  if (__builtin_expect(index_.size() * 2 > slots && slots < ThreadCache::kMaxLines, 0)) {
    wanted_thread_lines_.store(slots * 2, std::memory_order_relaxed);
  }
  const size_t hint_lines = wanted_hint_lines_.load(std::memory_order_relaxed);
  if (__builtin_expect(index_.size() >= CoveringHints::RegionsToOutgrow(hint_lines), 0)) {
    wanted_hint_lines_.store(CoveringHints::LinesFor(index_.size()), std::memory_order_relaxed);
  }
  if (timed_.CountRegistrationSampled(r->length())) CountRegionBytesLocked(r->length());
  // Without may_contain no indexed region overlaps r (InstallLocked's
  // contract), so r cannot overlap one it does not replace.
  bool overlaps_others = false;
  Region* replaced = may_contain ? UnindexContainedLocked(r, &overlaps_others) : nullptr;
  if (overlaps_others) {
    r->overlaps_others = true;
    ++overlapping_regions_;
  }
  // A union counts the parts whose requested bytes this request does not
  // cover, and keeps what the policy knew of them.
  uint32_t parts = 1;
  for (Region* p = replaced; p != nullptr; p = p->next_dead) {
    WithPolicy([r, p](auto& policy) { policy.Merged(r, p); });
    if (p->used_start < miss.start || p->used_end > miss.end) parts += p->parts;
  }
  r->parts = parts < UINT16_MAX ? static_cast<uint16_t>(parts) : UINT16_MAX;
  WithPolicy([r, tick](auto& policy) { policy.Installed(r, tick); });
  ThreadCache::Line* slot = TakeFirstRefLocked(tc, r);
  if (replaced != nullptr) SettleLocked(replaced, dead);
  // A streaming thread's new region gets no lookup entry (thread_cache.h).
  if (!tc->streaming) {
    FillLookupLocked(tc, miss.start, miss.end, miss.user_access, r, Range{r->start, r->end}, slot);
  }
  const size_t max_regions = config_.max_regions;
  const size_t max_bytes = config_.max_bytes;
  EvictLocked(
      [this, max_regions, max_bytes] {
        mu_.AssertHeld();  // EvictLocked calls this with mu_ held
        return (max_regions && index_.size() > max_regions) ||
               (max_bytes && cached_bytes_ > max_bytes);
      },
      dead);
  return r;
}

Region* CacheImpl::UnindexContainedLocked(Region* r, bool* overlaps_others) {
  Region* victims = nullptr;
  bool others = false;
  index_.ForEachOverlap(
      r->start, r->end, [r, &victims, &others](uintptr_t s, uintptr_t e, Region* o) {
        if (o == r) return;
        if (s >= r->start && e <= r->end && MergeCompatible(o->reg.access, r->reg.access) &&
            AccessCompatible(r->reg.access, o->reg.access)) {
          o->next_dead = victims;
          victims = o;
        } else {
          others = true;
        }
      });
  *overlaps_others = others;
  if (victims == nullptr) return nullptr;
  merges_.fetch_add(1, std::memory_order_relaxed);
  Region* candidates = nullptr;
  for (Region* o = victims; o != nullptr;) {
    Region* next = o->next_dead;
    // Whoever asked for o's bytes now finds r: r answers for them.
    if (o->used_start < r->used_start) r->used_start = o->used_start;
    if (o->used_end > r->used_end) r->used_end = o->used_end;
    UnindexLocked(o, &candidates);
    o = next;
  }
  return candidates;
}

absl::StatusOr<Region*> CacheImpl::AcquireImplicitOdp(uintptr_t start, uintptr_t end, int access) {
  auto implicit = bypass_.ImplicitRegion(access);
  if (!implicit.ok()) return implicit.status();
  Region* r = *implicit;
  if (!AccessCompatible(r->reg.access, access | kAccessOnDemand)) {
    // A bit the implicit MR lacks (e.g. HUGETLB): a dedicated ODP registration.
    return bypass_.Acquire(start, end, access | kAccessOnDemand);
  }
  bypass_.implicit().CountGet(r);
  slow_hits_.fetch_add(1, std::memory_order_relaxed);
  if (config_.odp_prefetch_bytes && end - start >= config_.odp_prefetch_bytes) {
    (void)registrar_->Prefetch(r->reg, reinterpret_cast<void*>(start), end - start);
  }
  return r;
}

// ---- put ----------------------------------------------------------------

absl::Status CacheImpl::Put(Region* r) { return InlinePut(r); }

__attribute__((noinline)) void CacheImpl::SettleRetired() {
  DeadList dead;
  {
    MutexLock lock(&mu_);
    RecheckRetiredLocked(&dead);
  }
  Deregister(&dead);
}

// A put that no slot of the calling thread counts: checked, under the lock.
__attribute__((noinline)) absl::Status CacheImpl::PutLocked(Region* r) {
  if (r == nullptr) return ErrnoStatus(EINVAL, "mrc_put: null region");
  if (r->cache != this) return ErrnoStatus(EINVAL, "mrc_put: region belongs to another cache");
  if (IsImplicitOdp(r->reg) || r->bypass) return bypass_.Put(r);
  DeadList dead;
  {
    MutexLock lock(&mu_);
    --r->locked_refs;
    if (TotalRefsLocked(r) < 0) {
      ++r->locked_refs;
      return ErrnoStatus(EINVAL, "mrc_put: region put more times than it was got");
    }
    if (r->state == RegionState::kInvalid) RecheckRetiredLocked(&dead);
  }
  Deregister(&dead);
  return absl::OkStatus();
}

// ---- explicit operations -------------------------------------------------------

absl::Status CacheImpl::Invalidate(void* addr, size_t length) {
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  if (length == 0) return ErrnoStatus(EINVAL, "mrc_invalidate: length is 0");
  if (start + length < start) return ErrnoStatus(EINVAL, "mrc_invalidate: addr + length overflows");
  if (absl::Status child = CheckNotForked("mrc_invalidate"); !child.ok()) return child;
  DeadList dead;
  {
    MutexLock lock(&mu_);
    MaintainLocked(&dead);
    Region* candidates = nullptr;
    InvalidateRangeLocked(start, start + length, Invalidation::kByCaller, &candidates);
    SpoilPendingLocked(start, start + length);
    if (candidates != nullptr) SettleLocked(candidates, &dead);
  }
  // mrcache.h: no registration over the range outlives the call, not even
  // one an earlier eviction left waiting for the background thread. So the
  // batch is deregistered here (handing it over would only be waited for).
  DeregisterNow(&dead);
  dereg_.WaitForDeregistrations();
  return absl::OkStatus();
}

absl::Status CacheImpl::Flush() {
  if (absl::Status child = CheckNotForked("mrc_flush"); !child.ok()) return child;
  DeadList dead;
  {
    MutexLock lock(&mu_);
    MaintainLocked(&dead);
    MRCACHE_DCHECK(IndexAgreesLocked());
    EvictLocked(
        [this] {
          mu_.AssertHeld();  // EvictLocked calls this with mu_ held
          return index_.size() != 0;
        },
        &dead);
  }
  // Its contract: everything deregistered on return.
  DeregisterNow(&dead);
  dereg_.WaitForDeregistrations();
  return absl::OkStatus();
}

absl::Status CacheImpl::DeviceWrite(Region* r, size_t offset, const void* src, size_t length) {
  if (r == nullptr || src == nullptr)
    return ErrnoStatus(EINVAL, "device write: null region or source");
  if (absl::Status child = CheckNotForked("device write"); !child.ok()) return child;
  if (IsImplicitOdp(r->reg)) {
    // The implicit MR spans everything: offset is an absolute address.
    return registrar_->DeviceWrite(r->reg, offset, src, length);
  }
  if (offset > r->length() || length > r->length() - offset) {
    return ErrnoStatus(EINVAL, "device write: offset + length exceeds the region");
  }
  return registrar_->DeviceWrite(r->reg, offset, src, length);
}

// ---- under the lock ---------------------------------------------------------

void CacheImpl::MaintainLocked(DeadList* dead) {
  tick_.store(tick_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Before draining: a report whose bump this load misses is pushed after it,
  // and voids every lookup entry filled with this generation.
  drained_gen_ = gen_.load(std::memory_order_acquire);
  if (__builtin_expect(!ring_.empty() || threads_.MayHaveOrphans() || reclaim_.has_retired(), 0)) {
    MaintainSlowLocked(dead);
  }
}

void CacheImpl::MaintainSlowLocked(DeadList* dead) {
  Region* candidates = nullptr;
  struct Drain {
    CacheImpl* self;
    Region** candidates;
  } drain{this, &candidates};
  // Ranges that found the ring full come last, as their 2 MiB-aligned hull
  // (invalidation_ring.h): releases are never lost, only coarsened.
  ring_.Drain([&drain](uintptr_t s, uintptr_t e) {
    drain.self->mu_.AssertHeld();  // drained under mu_ (this function requires it)
    drain.self->InvalidateRangeLocked(s, e, Invalidation::kMemoryGone, drain.candidates);
    drain.self->SpoilPendingLocked(s, e);
  });
  threads_.FoldOrphans(region_frees_);
  if (candidates != nullptr) SettleLocked(candidates, dead);
  RecheckRetiredLocked(dead);
}

size_t CacheImpl::FitPlanLocked(MissPlan* plan, uintptr_t exact_start, uintptr_t exact_end,
                                DeadList* dead) {
  const size_t missing = planner_.FitToBudget(plan, exact_start, exact_end);
  if (missing == 0) return 0;
  const size_t evicted = EvictBytesLocked(missing, dead);
  return evicted >= missing ? 0 : missing - evicted;
}

size_t CacheImpl::EvictBytesLocked(size_t bytes, DeadList* dead) {
  eviction_->ExpectEvictionsForBytes();
  const size_t before = cached_bytes_;
  EvictLocked(
      [this, before, bytes] {
        mu_.AssertHeld();  // EvictLocked calls this with mu_ held
        return before - cached_bytes_ < bytes;
      },
      dead, EvictionPolicy::Goal::kBytes);
  return before - cached_bytes_;
}

size_t CacheImpl::MakeRoom(size_t bytes) {
  // The pages are needed now: first those already on their way back.
  size_t released = dereg_.WaitForAllDeregistrations();
  if (released >= bytes) return released;
  DeadList dead;
  {
    MutexLock lock(&mu_);
    MaintainLocked(&dead);
    released += EvictBytesLocked(bytes - released, &dead);
  }
  DeregisterNow(&dead);
  if (released < bytes && budget_ != nullptr) {
    released += budget_->ReclaimOthers(this, bytes - released);
  }
  return released;
}

size_t CacheImpl::ReclaimUnused(size_t bytes) {
  // A parent's cache in a fork child never calls its registrar.
  if (ForkGeneration() != fork_generation_) return 0;
  DeadList dead;
  size_t released;
  {
    MutexLock lock(&mu_);
    released = EvictBytesLocked(bytes, &dead);
  }
  DeregisterNow(&dead);  // another cache needs the pages now
  return released;
}

void CacheImpl::DetachLocked(Region* r) {
  MRCACHE_DCHECK(r->state == RegionState::kCached);  // a region leaves the index once
  index_.DetachNode(r->start, r);                    // the node is part of r, freed with it
  // Overlapping another region (other rights) is rare.
  if (__builtin_expect(r->overlaps_others, 0)) --overlapping_regions_;
  hints_.Void(r);  // its covering hints
  cached_bytes_ -= r->length();
  WithPolicy([r](auto& policy) { policy.Removed(r); });
  r->state = RegionState::kInvalid;
}

void CacheImpl::UnindexLocked(Region* r, Region** candidates) {
  DetachLocked(r);
  reclaim_.Retire(r, candidates);
}

void CacheImpl::BumpGenerationAndFence() {
  // Our own bump voids no report: keep drained_gen_ current unless a report
  // bumped the generation since the drain.
  const uint64_t before = gen_.fetch_add(1, std::memory_order_acq_rel);
  if (before == drained_gen_) drained_gen_ = before + 1;
  // Lock-free hits run only on threads with a live ThreadCache; a thread
  // attaches under mu_ (held here). If the only one is ours, no hit can race
  // with this reclaimer and the asymmetric fence is not needed.
  if (!threads_.Alone()) ReclaimerFence();
}

bool CacheImpl::IndexAgreesLocked() const {
  struct Sum {
    const CacheImpl* self;
    size_t bytes, overlapping;
    bool agree;
  } sum{this, 0, 0, true};
  index_.ForEach([&sum](uintptr_t s, uintptr_t e, Region* r) {
    sum.bytes += e - s;
    sum.overlapping += r->overlaps_others ? 1 : 0;
    sum.agree = sum.agree && r->state == RegionState::kCached && r->cache == sum.self &&
                !r->bypass && !r->on_retired_list && r->start == s && r->end == e;
  });
  return sum.agree && reclaim_.RetiredAgree() && sum.bytes == cached_bytes_ &&
         sum.overlapping == overlapping_regions_;
}

void CacheImpl::InvalidateRangeLocked(uintptr_t start, uintptr_t end, Invalidation why,
                                      Region** candidates) {
  // voided_regions.h says which.
  Region* voided = RegionsVoidedBy(index_, start, end, align_, page_);
  uintptr_t dropped_start = UINTPTR_MAX, dropped_end = 0;
  while (voided != nullptr) {
    Region* r = voided;
    voided = r->next_dead;
    invalidations_.fetch_add(1, std::memory_order_relaxed);
    r->invalidated = why;
    if (r->start < dropped_start) dropped_start = r->start;
    if (r->end > dropped_end) dropped_end = r->end;
    UnindexLocked(r, candidates);
  }
  if (dropped_start < dropped_end) {
    planner_.Invalidated(start > dropped_start ? start : dropped_start,
                         end < dropped_end ? end : dropped_end);
  }
}

void CacheImpl::SpoilPendingLocked(uintptr_t start, uintptr_t end) { pending_.Spoil(start, end); }

template <typename Pred>
void CacheImpl::EvictLocked(Pred over, DeadList* dead, EvictionPolicy::Goal goal) {
  // The policy names each victim (eviction.h); reclamation takes it: out of
  // the index, and deregistered once no reference is left. The reference
  // counts are checked again after the fence in SettleLocked; a region that
  // turned out to be in use stays retired until its last put (never
  // deregistered early).
  // This thread's deferred stamps first: its own recent uses count. Tested
  // here, as ThreadCache::FoldDisplaced would: usually there is nothing to fold.
  ThreadCache* mine = FindThreadCache(uid_);
  if (mine != nullptr && mine->HasDisplaced(region_frees_)) mine->FoldDisplaced(region_frees_);
  if (!over()) return;  // most installs: nothing to evict
  // With no other live thread attached, no get or put reaches a region
  // without the lock, so an unused victim is deregistered at once: no
  // retired mark, no fence, no second count (SettleLocked).
  const bool alone = threads_.Alone();
  EvictionUse use(this);
  EvictionPolicy::Pass pass{goal, tick_.load(std::memory_order_relaxed),
                            WithPolicy([this](auto& policy) {
                              mu_.AssertHeld();  // WithPolicy calls this with mu_ held
                              return policy.StepsFor(index_.size());
                            }),
                            &use};
  Region* candidates = nullptr;
  size_t victims = 0;
  while (over()) {
    Region* r =
        clock_ != nullptr ? clock_->NextVictimBy(&pass, &use) : eviction_->NextVictim(&pass);
    if (r == nullptr) break;
    // A policy names only cached regions that are unused (eviction.h). With
    // other threads attached, one of them may have hit r without the lock
    // since the policy looked: SettleLocked's count sees that reference.
    MRCACHE_DCHECK(r->state == RegionState::kCached && (!alone || use.UnusedSincePlaced(r)));
    if (alone) {
      DetachLocked(r);
      KillLocked(r, dead);
    } else {
      UnindexLocked(r, &candidates);
    }
    ++victims;
  }
  if (victims == 0) return;
  evictions_.fetch_add(victims, std::memory_order_relaxed);
  if (candidates != nullptr) SettleLocked(candidates, dead);
}

bool CacheImpl::NotAdmittedLocked(const Miss& miss, const MissPlan& plan) {
  const size_t max_regions = config_.max_regions;
  if (max_regions == 0 || index_.size() < max_regions) return false;
  if (!WithPolicy([](const auto& policy) { return policy.MayRefuseAdmission(); })) return false;
  return NotAdmittedByPolicyLocked(miss, plan);
}

bool CacheImpl::NotAdmittedByPolicyLocked(const Miss& miss, const MissPlan& plan) {
  const size_t budget = ProcessBudget();
  if (budget != 0 && budget_->pinned() + (miss.page_end - miss.page_start) > budget) return false;
  // Pages that touch a cached region may merge with it (and replace it,
  // adding no region); a plan that bridges widens: both are cached. The
  // plan, made under this hold of mu_, knows whether any region overlaps.
  if (plan.overlapped) return false;
  if (plan.start != miss.plan_start || plan.end != miss.plan_end || plan.has_block()) {
    return false;
  }
  // Numbered from the address modulo 2^kHashedAddressBits, as the policy
  // hashes them (hashed_address.h).
  const uint64_t first_page = HashedAddress(miss.page_start) / page_;
  return !eviction_->AdmitsToFullCache(first_page,
                                       first_page + (miss.page_end - miss.page_start) / page_);
}

// ---- outside the lock ------------------------------------------------------

uint64_t CacheImpl::StartMissTiming() const {
  // Threads that miss at once may read the same count: a few more or fewer
  // misses are sampled then, still none chosen by what they ask for.
  if (misses_.load(std::memory_order_relaxed) % kHistogramSampleEvery != 0) return 0;
  return NowTicks(tsc_ticks_);
}

uint64_t CacheImpl::SampledMissNs(uint64_t t0) const {
  const uint64_t t1 = NowTicks(tsc_ticks_);
  return t1 > t0 ? TicksToNsAt(t1 - t0, ns_per_tick_) : 0;
}

void CacheImpl::CountServedMiss(uint64_t t0, size_t requested) {
  if (t0 == 0) return;
  histograms_.get_bytes.Add(requested);
  histograms_.miss_ns.Add(SampledMissNs(t0));
}

void CacheImpl::CountInstalledMissLocked(const Attempt& attempt, uint64_t t0, size_t requested) {
  if (__builtin_expect(t0 != 0, 0)) CountSampledInstallLocked(attempt, t0, requested);
}

void CacheImpl::CountSampledInstallLocked(const Attempt& attempt, uint64_t t0, size_t requested) {
  locked_histograms_.miss_ns.Add(SampledMissNs(t0));
  locked_histograms_.register_ns.Add(TicksToNsAt(attempt.register_ticks, ns_per_tick_));
  locked_histograms_.get_bytes.Add(requested);
}

void CacheImpl::CountRegionBytesLocked(size_t bytes) { locked_histograms_.region_bytes.Add(bytes); }

void CacheImpl::ReadHistograms(CacheHistogramCounts* out) {
  histograms_.region_bytes.Read(out->region_bytes, &out->sums[0]);
  histograms_.miss_ns.Read(out->miss_ns, &out->sums[1]);
  histograms_.register_ns.Read(out->register_ns, &out->sums[2]);
  histograms_.deregister_ns.Read(out->deregister_ns, &out->sums[3]);
  histograms_.get_bytes.Read(out->get_bytes, &out->sums[4]);
  MutexLock lock(&mu_);
  locked_histograms_.region_bytes.AddTo(out->region_bytes, &out->sums[0]);
  locked_histograms_.miss_ns.AddTo(out->miss_ns, &out->sums[1]);
  locked_histograms_.register_ns.AddTo(out->register_ns, &out->sums[2]);
  locked_histograms_.get_bytes.AddTo(out->get_bytes, &out->sums[4]);
}

void CacheImpl::EndQuarantineBatch(Region* batch) {
  {
    MutexLock lock(&mu_);
    ++region_frees_;
    // Every lookup entry filled before now is void from here on: none can
    // name a Region of the batch when its memory is reused.
    BumpGenerationAndFence();
    batch = spares_.Keep(batch);
  }
  FreeRegions(batch);
}

// The public Cache's get and put (mrcache/cache.h), here rather than in
// cache.cc so that CacheImpl's get and put inline into them: one call and
// one frame fewer on every hit, and one frame fewer for a miss to return
// through after its registrar call.
absl::StatusOr<Region*> Cache::Acquire(void* addr, size_t length, int access) {
  if (__builtin_expect(rails_ != nullptr, 0)) return AcquireRails(addr, length, access, 1);
  return impl_->InlineAcquire(addr, length, access);
}

absl::Status Cache::Put(Region* region) { return impl_->InlinePut(region); }

}  // namespace mrcache
