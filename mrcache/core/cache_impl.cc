// cache_impl.cc: CacheImpl. The protocol is stated in cache_impl.h.
#include "mrcache/core/cache_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mrcache/core/bypass.h"
#include "mrcache/core/cache_impl-inl.h"
#include "mrcache/core/dcheck.h"
#include "mrcache/core/fences.h"
#include "mrcache/core/range.h"
#include "mrcache/core/residency.h"
#include "mrcache/core/tick_rate.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/monitors/mapping_bounds.h"
#include "mrcache/monitors/monitor_sync.h"
#include "mrcache/registrars/odp.h"
#include "mrcache/registrars/region_limit.h"

// Under AddressSanitizer, Regions whose quarantine ended are freed, never
// reused (CacheImpl::Quarantine), so that a use after free stays visible.
#if defined(__SANITIZE_ADDRESS__)
#define MRCACHE_FREE_EVERY_REGION 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MRCACHE_FREE_EVERY_REGION 1
#endif
#endif

namespace mrcache {
namespace {

std::atomic<uint64_t> g_next_cache_uid{1};

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Registrar time (stats' registrar_ns) is summed in ticks of the cheapest
// clock that runs at a constant rate: the x86 time-stamp counter where the
// CPU says it is invariant (CPUID 0x80000007, EDX bit 8: constant rate in
// every P- and C-state), else steady_clock's nanoseconds. A miss reads it
// four times (register, deregister); the TSC read costs about a third of a
// clock_gettime (bench/RESULTS.md). Ticks become nanoseconds when stats are
// read, at one rate measured once (TickClock), so that registrar_ns is a
// function of the ticks: it never moves without a registrar call.
bool InvariantTsc() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // __get_cpuid is 0 where the CPU has no such leaf.
  if (__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

// Set up on first use (a cache may be created by another library's static
// initializer): whether ticks are TSC ticks, and nanoseconds per tick,
// measured against steady_clock over kCalibrationNs (half a millisecond,
// once per process: the rate is then good to about 1e-4; tick_rate.h says
// how a preemption during it is kept out).
struct TickClock {
  static constexpr uint64_t kCalibrationNs = 500'000;
  static constexpr int kEndReadings = 5;
  bool tsc = InvariantTsc();
  double ns_per_tick = 1.0;
  TickClock() {
    if (!tsc) return;
    ns_per_tick = MeasureNsPerTick([] { return Read(true); }, NowNs, kCalibrationNs, kEndReadings);
    if (ns_per_tick == 0) {
      tsc = false;  // a counter that does not advance: use the clock itself
      ns_per_tick = 1.0;
    }
  }
  static uint64_t Read(bool tsc) {
#if defined(__x86_64__) || defined(__i386__)
    if (tsc) return __rdtsc();
#endif
    return NowNs();
  }
};
// The process's TickClock, measured by the first caller that finds none.
// Not a function-local static: its guard would hold concurrent callers for
// the whole measurement, and a fork() meanwhile would leave the child's copy
// of the guard "in progress" forever, so that the child's first cache hung
// (tests/interpose/fork_test.cc, a child of a process busy in the shim).
// Concurrent first callers each measure; the first result stored is kept.
const TickClock& Ticks() {
  static std::atomic<const TickClock*> clock{nullptr};  // constant-initialized: no guard
  const TickClock* kept = clock.load(std::memory_order_acquire);
  if (kept != nullptr) return *kept;
  const TickClock* mine = new TickClock;  // kept for the process's lifetime
  if (clock.compare_exchange_strong(kept, mine, std::memory_order_acq_rel)) return *mine;
  delete mine;
  return *kept;
}

// `tsc`: Ticks().tsc, which a cache keeps (tsc_ticks_) so that a read
// does not check that the static is set up.
inline uint64_t NowTicks(bool tsc) { return TickClock::Read(tsc); }

// Adds the ticks since t0 to `sum` (none if the thread moved to a CPU whose
// counter reads behind).
// Returns them (0 then).
inline uint64_t AddTicksSince(std::atomic<uint64_t>& sum, uint64_t t0, bool tsc) {
  const uint64_t t1 = NowTicks(tsc);
  // Expected: GCC otherwise places the add out of line, two taken jumps on
  // every registrar call (bench/RESULTS.md, "Code after the registrar's
  // system call").
  if (__builtin_expect(t1 > t0, 1)) {
    sum.fetch_add(t1 - t0, std::memory_order_relaxed);
    return t1 - t0;
  }
  return 0;
}

// Nanoseconds in `ticks` of NowTicks().
uint64_t TicksToNs(uint64_t ticks) {
  const TickClock& clock = Ticks();
  if (!clock.tsc) return ticks;
  return static_cast<uint64_t>(static_cast<double>(ticks) * clock.ns_per_tick);
}

void AtomicMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

// A miss widens beyond its own pages (merging) only where no region died by
// invalidation within this many misses (see address_heat.h).
constexpr uint64_t kMergeCooldownMisses = 4096;

// Under a pin budget, the largest share of it a widened region may take
// (PlanMissLocked): one that only absorbs regions whose requested bytes the
// request covers, and one that joins other requests' bytes.
constexpr size_t kAbsorbingShare = 4;
constexpr size_t kJoiningShare = 16;

}  // namespace

CacheImpl::CacheImpl(const Config& config, std::unique_ptr<Registrar> registrar,
                     std::unique_ptr<EvictionPolicy> eviction)
    : config_(config),
      registrar_(std::move(registrar)),
      uid_(g_next_cache_uid.fetch_add(1)),
      align_(config.alignment ? config.alignment : static_cast<size_t>(sysconf(_SC_PAGESIZE))),
      page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))),
      pid_(getpid()),
      fork_generation_(ForkGeneration()),
      tsc_ticks_(Ticks().tsc),
      ns_per_tick_(Ticks().ns_per_tick),
      eviction_(eviction != nullptr ? std::move(eviction)
                                    : MakeDefaultEvictionPolicy(config.max_regions)),
      clock_(dynamic_cast<ClockEviction*>(eviction_.get())) {}

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

absl::StatusOr<std::unique_ptr<CacheImpl>> CacheImpl::Create(
    const Config& config, std::unique_ptr<Registrar> registrar,
    std::unique_ptr<EvictionPolicy> eviction) {
  if (registrar == nullptr) return ErrnoStatus(EINVAL, "no registrar");
  absl::Status valid = config.Validate();
  if (!valid.ok()) return valid;
  std::unique_ptr<CacheImpl> cache(new CacheImpl(
      config, WithRegionLimit(std::move(registrar), config.max_region_bytes), std::move(eviction)));
  cache->max_region_ = cache->registrar_->max_region_bytes();

  // On-demand paging: resolve the mode against the device's capabilities.
  auto odp = ResolveOdpMode(config.odp, cache->registrar_->odp_capabilities());
  if (!odp.ok()) return odp.status();
  cache->odp_ = *odp;

  if (cache->odp_ == OdpMode::kImplicit) {
    // The implicit MRs (one per set of remote rights) are registered on first
    // use; register the most common one now so that a device that fails it
    // fails cache creation, with its reason.
    auto first = cache->ImplicitRegion(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    if (!first.ok()) return first.status();
  }

  // ODP regions need no monitor for correctness.
  std::string monitor = cache->odp_ == OdpMode::kOff ? config.monitor : std::string("none");
  auto lease = AcquireMonitor(monitor);
  if (!lease.ok() && monitor == "auto") {
    Log(LogLevel::kWarning,
        absl::StrCat("monitor 'auto' unavailable (", lease.status().message(), "); using 'none'"));
    cache->monitor_incomplete_ = true;
    lease = AcquireMonitor("none");
  }
  if (!lease.ok()) return lease.status();
  cache->monitor_ = std::move(*lease);
  std::string shortfall = cache->monitor_->shortfall();
  if (!shortfall.empty()) {
    Log(LogLevel::kWarning, absl::StrCat("warning: monitor '", monitor, "' is incomplete, using '",
                                         cache->monitor_->name(), "': ", shortfall));
    cache->monitor_incomplete_ = true;
  }
  cache->bridging_safe_ = cache->odp_ == OdpMode::kExplicit || cache->monitor_->complete();
  cache->watch_ranges_ = cache->monitor_->watches_ranges();

  absl::Status listen = AddMemoryEventListener(cache.get());
  if (!listen.ok()) return listen;
  cache->listening_ = true;

  // Regions that pin count against the process's budget; on-demand paging,
  // and registrars that pin nothing (registrar.h), need none.
  if (cache->odp_ == OdpMode::kOff && cache->registrar_->pins_memory()) {
    PinBudget& budget = PinBudget::Process();
    budget.Refresh();
    budget.Join(cache.get());
    cache->budget_ = &budget;
  }
  // Deregistrations leave the critical path where they are costly: regions
  // that pin (auto), or wherever the config says on.
  if (config.async_dereg == AsyncDereg::kOn ||
      (config.async_dereg == AsyncDereg::kAuto && cache->budget_ != nullptr)) {
    cache->dereg_lane_ = DeregistrationQueue::Process().Join(cache.get());
  }
  {
    MutexLock lock(&cache->mu_);
    // Under a binding budget evictions for bytes come (another cache's
    // ReclaimUnused may have said so already).
    if (cache->ProcessBudget() != 0) cache->eviction_->ExpectEvictionsForBytes();
  }
  return cache;
}

CacheImpl::~CacheImpl() {
  if (budget_ != nullptr) budget_->Leave(this);  // no other cache reclaims from us from now on
  if (listening_) RemoveMemoryEventListener(this);
  const bool child = InForkChild();
  if (dereg_lane_ != nullptr) {
    if (child) {
      FreeRegions(DeregistrationQueue::Process().TakeAll(dereg_lane_));  // the parent's
    } else {
      WaitForDeregistrations();
    }
  }
  DeadList dead;
  int64_t held = 0;
  {
    MutexLock lock(&mu_);
    threads_.FoldOrphans(region_frees_);
    MRCACHE_DCHECK(IndexAgreesLocked());
    Region* all = nullptr;
    index_.ForEach([&all](uintptr_t, uintptr_t, Region* r) {
      r->next_dead = all;
      all = r;
    });
    while (all != nullptr) {
      Region* r = all;
      all = r->next_dead;
      if (TotalRefsLocked(r) > 0) ++held;
      index_.DetachNode(r->start, r);  // the node is part of r
      dead.Push(r);
    }
    reclaim_.TakeAllRetired([&held, &dead](Region* r) {
      ++held;
      dead.Push(r);
    });
    eviction_->Clear();
    held += implicit_.Held();
  }
  if (held > 0 && !child) {
    Log(LogLevel::kWarning,
        absl::StrCat("warning: destroying a cache while ", held,
                     " region(s) are still held; releasing their registrations"));
  }
  implicit_.TakeAll([&dead](Region* r) { dead.Push(r); });
  if (child) {
    // fork(): the registrations belong to the parent. Free our bookkeeping
    // only; never call the registrar, whose kernel objects the parent shares.
    FreeRegions(dead.head);
    (void)registrar_.release();  // owned by the parent's address space image
  } else {
    DeregisterNow(&dead);
  }
  if (dereg_lane_ != nullptr) DeregistrationQueue::Process().Leave(dereg_lane_);
  FreeRegions(quarantine_.exchange(nullptr));  // no thread uses the cache any more
  Region* spare[2];
  {
    MutexLock lock(&mu_);
    spare[0] = spare_regions_;
    spare[1] = spare_batch_;
    spare_regions_ = spare_batch_ = nullptr;
  }
  FreeRegions(spare[0]);
  FreeRegions(spare[1]);
}

// ---- memory events (hook context) -----------------------------------------

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
  if (access & (kAccessMwBind | kAccessZeroBased)) return AcquireBypass(start, end, access);
  if ((access & kAccessRemoteBits) && config_.remote_keys == RemoteKeys::kPrivate) {
    // An rkey of exactly the requested bytes, revoked at put (cache.h).
    const int odp = odp_ == OdpMode::kExplicit || odp_ == OdpMode::kImplicit ? kAccessOnDemand : 0;
    return AcquireBypass(start, end, access | odp, BypassKind::kRemotePrivate);
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
  absl::StatusOr<Region*> r = AcquireBypass(page_start, page_end, access, BypassKind::kOversized);
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

uint64_t CacheImpl::read_locked_hits() const {
  MutexLock lock(&mu_);
  return threads_.ReadLockedHits();
}

size_t CacheImpl::thread_table_lines() const {
  const ThreadCache* tc = FindThreadCache(uid_);
  return tc != nullptr ? tc->mask + 1 : 0;
}

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
      plan = PlanForLocked(miss);
      if (may_bypass && NotAdmittedLocked(miss, plan)) {
        lock.Unlock();
        discard();
        absl::StatusOr<Region*> own =
            AcquireBypass(miss.page_start, miss.page_end, miss.access, BypassKind::kNotAdmitted);
        const int err = own.ok() ? 0 : StatusToErrno(own.status());
        if (err == 0) CountServedMiss(miss_t0, end - start);
        if (err != ENOMEM && err != EAGAIN) return own;
        may_bypass = false;  // the normal path makes room and retries
        continue;
      }
      installs_seen = installs_;
      shortfall = PlanAttemptLocked(&miss, &plan, &pending, &dead);
      fresh = TakeSpareRegionLocked();
    }
    fresh = ReuseRegion(fresh);
    DeregisterBeforeRegistering(&dead, plan.end - plan.start);
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
    CountRegistration(attempt.reg->length);
    TimedDeregister(*attempt.reg);
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

MissPlan CacheImpl::PlanForLocked(const Miss& miss) {
  // Merging is on by default (config.h: max_merge_bytes).
  if (__builtin_expect(miss.allow_merge, 1)) {
    return PlanMissLocked(miss.plan_start, miss.plan_end, miss.access);
  }
  MissPlan plan{miss.plan_start, miss.plan_end, 0};
  bool overlapped = false;
  index_.ForEachOverlap(miss.plan_start, miss.plan_end,
                        [&overlapped](uintptr_t, uintptr_t, Region*) { overlapped = true; });
  plan.overlapped = overlapped;
  return plan;
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
  const bool bridged = plan.has_block() && BridgeOutsideLock(plan, &start, &end);
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
                 widened_range, widened, watch,  TimedRegister(start, end, access, &ticks),
                 ticks};
}

void CacheImpl::EndAttemptLocked(const MissPlan& plan, const Attempt& attempt,
                                 PendingMiss* pending) {
  // Only a plan with a bridge block can have bridged; most have none.
  if (__builtin_expect(plan.has_block(), 0)) {
    const uint64_t now = misses_.load(std::memory_order_relaxed);
    if (!attempt.bridged) {
      // Nothing resident to bridge here: do not look again on every miss.
      // (Merging does not consult this: only invalidations cool it.)
      bridge_failed_.Mark(plan.block_start, plan.block_end, now);
    } else if (!attempt.reg.ok()) {
      // Memory that cannot be registered: do not widen into it again soon.
      const int err = StatusToErrno(attempt.reg.status());
      if (err == EFAULT || err == EINVAL) bridge_failed_.Mark(attempt.start, attempt.end, now);
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
    const size_t limit = budget_ != nullptr ? budget_->limit() : 0;
    size_t to_free = need;  // without a known limit: room for the request
    bool hopeless = false;
    if (limit != 0) {
      const size_t pinned_then = budget_->pinned();
      if (pinned_then + need <= budget_->budget()) budget_->Lower(pinned_then);
      // Beyond the limit itself nothing that could be evicted helps.
      hopeless = need > limit;
      const size_t ceiling = need > budget_->budget() ? limit : budget_->budget();
      if (pinned_then + need > ceiling) to_free = pinned_then + need - ceiling;
    }
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
  CountRegistrationLocked(r->length());
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

absl::StatusOr<Region*> CacheImpl::AcquireBypass(uintptr_t start, uintptr_t end, int access,
                                                 BypassKind kind) {
  // MW_BIND / ZERO_BASED, remote rights under remote_keys=private, and
  // misses too large for the pin budget: a dedicated registration of exactly
  // the range, never shared, deregistered on put.
  absl::StatusOr<Registration> reg = TimedRegister(start, end, access);
  if (!reg.ok()) {
    // Refusals the normal path then retries are not failures.
    const int err = StatusToErrno(reg.status());
    const bool retried = kind == BypassKind::kOversized ||
                         (kind == BypassKind::kNotAdmitted && (err == ENOMEM || err == EAGAIN));
    if (!retried) registrar_failures_.fetch_add(1, std::memory_order_relaxed);
    return reg.status();
  }
  return AdoptBypass(start, end, *reg, kind);
}

Region* CacheImpl::AdoptBypass(uintptr_t start, uintptr_t end, const Registration& reg,
                               BypassKind kind) {
  auto* r = new Region;
  r->start = start;
  r->end = end;
  r->reg = reg;
  r->cache = this;
  r->bypass = true;
  r->locked_refs = 1;
  (kind == BypassKind::kRemotePrivate ? remote_private_ : bypassed_)
      .fetch_add(1, std::memory_order_relaxed);
  CountRegistration(end - start);
  return r;
}

absl::StatusOr<Region*> CacheImpl::ImplicitRegion(int access) {
  // One implicit MR per set of remote rights, so that its rkey grants exactly
  // what was asked for; local write is always included.
  if (Region* r = implicit_.Find(access)) return r;
  auto reg = TimedImplicitRegister(kAccessLocalWrite | (access & kAccessRemoteBits));
  if (!reg.ok()) return reg.status();
  auto* r = new Region;
  r->start = 0;
  r->end = UINTPTR_MAX;
  r->reg = *reg;
  r->cache = this;
  Region* published = implicit_.Publish(access, r);
  if (published != r) {
    TimedDeregister(r->reg);  // another thread won the race
    delete r;
  }
  return published;
}

absl::StatusOr<Registration> CacheImpl::TimedImplicitRegister(int access) {
  const uint64_t t0 = NowTicks(tsc_ticks_);
  auto reg = RegisterImplicitOdp(*registrar_, access);
  AddTicksSince(registrar_ticks_, t0, tsc_ticks_);
  if (reg.ok()) CountRegistration(0);  // pins nothing
  return reg;
}

absl::StatusOr<Region*> CacheImpl::AcquireImplicitOdp(uintptr_t start, uintptr_t end, int access) {
  auto implicit = ImplicitRegion(access);
  if (!implicit.ok()) return implicit.status();
  Region* r = *implicit;
  if (!AccessCompatible(r->reg.access, access | kAccessOnDemand)) {
    // A bit the implicit MR lacks (e.g. HUGETLB): a dedicated ODP registration.
    return AcquireBypass(start, end, access | kAccessOnDemand);
  }
  implicit_.CountGet(r);
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
  if (ImplicitOdpRegions::Is(r->reg)) {
    if (!implicit_.CountPut(r)) {
      return ErrnoStatus(EINVAL, "mrc_put: region put more times than it was got");
    }
    return absl::OkStatus();
  }
  if (r->bypass) {
    if (r->locked_refs != 1)
      return ErrnoStatus(EINVAL, "mrc_put: region put more times than it was got");
    r->locked_refs = 0;
    TimedDeregister(r->reg);
    delete r;
    return absl::OkStatus();
  }
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
    InvalidateRangeLocked(start, start + length, &candidates);
    SpoilPendingLocked(start, start + length);
    if (candidates != nullptr) SettleLocked(candidates, &dead);
  }
  Deregister(&dead);
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
  WaitForDeregistrations();
  return absl::OkStatus();
}

absl::Status CacheImpl::DeviceWrite(Region* r, size_t offset, const void* src, size_t length) {
  if (r == nullptr || src == nullptr)
    return ErrnoStatus(EINVAL, "device write: null region or source");
  if (absl::Status child = CheckNotForked("device write"); !child.ok()) return child;
  if (ImplicitOdpRegions::Is(r->reg)) {
    // The implicit MR spans everything: offset is an absolute address.
    return registrar_->DeviceWrite(r->reg, offset, src, length);
  }
  if (offset > r->length() || length > r->length() - offset) {
    return ErrnoStatus(EINVAL, "device write: offset + length exceeds the region");
  }
  return registrar_->DeviceWrite(r->reg, offset, src, length);
}

CacheStats CacheImpl::stats() {
  CacheStats s;
  uint64_t thread_hits = 0;
  {
    MutexLock lock(&mu_);
    thread_hits = threads_.Hits() + threads_.ReadLockedHits();
  }
  s.hits = thread_hits + slow_hits_.load();
  s.misses = misses_.load();
  // Deregistrations first: each follows its registration, so the difference
  // (the live regions) is never negative.
  s.deregistrations = deregistrations_.load();
  s.registrations = registrations_.load();
  s.evictions = evictions_.load();
  s.invalidations = invalidations_.load();
  s.merges = merges_.load();
  s.regions = s.registrations - s.deregistrations;
  s.pinned_bytes = pinned_bytes_.load();
  s.registrar_ns = TicksToNs(registrar_ticks_.load());
  s.peak_pinned_bytes = peak_pinned_bytes_.load();
  s.registrar_failures = registrar_failures_.load();
  s.bypassed = bypassed_.load();
  s.remote_private = remote_private_.load();
  s.monitor_incomplete = monitor_incomplete_ ? 1 : 0;
  s.pin_budget_bytes = PinBudgetBytes();
  if (monitor_) {
    const WatchFailureCounts w = monitor_->watch_failures();
    s.watch_failures = w.total;
    s.watch_enomem = w.enomem;
    s.watch_ebusy = w.ebusy;
    s.watch_eperm = w.eperm;
    s.watch_einval = w.einval;
    s.watch_map_limit = w.map_limit;
    s.watch_other = w.other;
  }
  if (dereg_lane_ != nullptr)
    s.dereg_queue_depth = DeregistrationQueue::Process().Depth(dereg_lane_);
  s.dereg_wait_ns = dereg_wait_ns_.load(std::memory_order_relaxed);
  return s;
}

void CacheImpl::SetRetireCallback(Cache::RetireCallback callback) {
  MutexLock lock(&mu_);
  has_retire_cb_.store(static_cast<bool>(callback), std::memory_order_release);
  retire_cb_ = std::move(callback);
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
    drain.self->InvalidateRangeLocked(s, e, drain.candidates);
    drain.self->SpoilPendingLocked(s, e);
  });
  threads_.FoldOrphans(region_frees_);
  if (candidates != nullptr) SettleLocked(candidates, dead);
  RecheckRetiredLocked(dead);
}

MissPlan CacheImpl::PlanMissLocked(uintptr_t start, uintptr_t end, int access) {
  const int remote = access & kAccessRemoteBits;
  auto compatible = [access](const Region* r) { return MergeCompatible(r->reg.access, access); };
  const uint64_t now = misses_.load(std::memory_order_relaxed);
  // Asked on every plan, so that its windows stay near kWindowMisses.
  const bool churning = churn_.Churning(now, invalidations_.load(std::memory_order_relaxed));
  MissPlan plan{start, end, 0};

  // Merge: the union with every compatible region that overlaps the request
  // (one pass, not transitively), within max_merge_bytes, unless regions died
  // by invalidation around here lately (address_heat.h).
  struct Union {
    uintptr_t s, e;
    int local;
  } u{start, end, 0};
  bool overlapped = false;
  bool joins = false;  // the union takes in bytes another request asked for
  index_.ForEachOverlap(start, end, [&](uintptr_t s, uintptr_t e, Region* r) {
    overlapped = true;
    if (!compatible(r)) return;
    u.local |= r->reg.access & kAccessLocalWrite;
    if (s < u.s) u.s = s;
    if (e > u.e) u.e = e;
    if (r->used_start < start || r->used_end > end) joins = true;
  });
  plan.overlapped = overlapped;
  const bool widens = u.s < start || u.e > end;
  // Under a pin budget, a widened region takes at most a share of it:
  // merging and bridging shrink as the budget tightens. A union that only
  // absorbs regions whose requested bytes the request covers frees theirs:
  // up to a quarter (as a bridged block). One that joins other requests'
  // bytes is evicted as one region, and takes their bytes with it: up to a
  // sixteenth (bench/RESULTS.md, "Joining neighbours under the budget"), and
  // only where regions live (below).
  const size_t budget = ProcessBudget();
  // Nor beyond the registrar's longest region (a device's max_mr_size).
  auto cap = [this, budget](size_t share) {
    const size_t merge = max_region_ != 0 && max_region_ < config_.max_merge_bytes
                             ? max_region_
                             : config_.max_merge_bytes;
    return budget != 0 && budget / share < merge ? budget / share : merge;
  };
  const size_t widen_cap = cap(joins ? kJoiningShare : kAbsorbingShare);
  if (u.e - u.s > widen_cap || (widens && InvalidatedLatelyLocked(u.s, u.e, now))) {
    return plan;
  }
  // Nor, under a budget, while cached regions keep dying by invalidation
  // (address_churn.h): the joined buffers would be pinned together and
  // freed apart. Such a miss registers its own pages: it is not bridged
  // either. (A miss that joins nothing may still bridge; the block's own
  // invalidation history decides, below.)
  if (joins && budget != 0 && churning) return plan;
  plan.start = u.s;
  plan.end = u.e;
  plan.local = u.local;

  // Bridge candidate: the bridge_bytes-aligned block(s) holding the union, if
  // they hold another compatible region and no region died there lately.
  // BridgeOutsideLock then decides how far the registration really widens.
  // Bridging registers memory no request named, so some release of it must
  // be reported however it happens: only with a complete monitor, or with
  // on-demand paging (whose regions cannot go stale). Never with remote
  // rights: their rkey would reach memory no remote request named.
  if (!bridging_safe_ || remote != 0) return plan;
  size_t block = config_.bridge_bytes < config_.max_merge_bytes ? config_.bridge_bytes
                                                                : config_.max_merge_bytes;
  if (config_.max_bytes != 0 && block > config_.max_bytes / 4) block = config_.max_bytes / 4;
  if (budget != 0 && block > budget / 4) {
    block = budget / 4;
    while (block & (block - 1)) block &= block - 1;  // the largest power of two within
  }
  if (max_region_ != 0 && block > max_region_) {
    block = max_region_;
    while (block & (block - 1)) block &= block - 1;
  }
  if (block < 2 * page_ || (block & (block - 1)) != 0) return plan;
  const uintptr_t bs = AlignDown(u.s, block);
  const uintptr_t be = AlignUp(u.e, block);
  if (be == 0 || be - bs > cap(kAbsorbingShare)) return plan;
  // The cheap refusals first: the scan below visits every region of the
  // block, thousands in a large cache.
  if (InvalidatedLatelyLocked(bs, be, now) ||
      bridge_failed_.Recent(bs, be, now, kMergeCooldownMisses)) {
    return plan;
  }
  struct Neighbours {
    uintptr_t below_end, above_start;
    int local;
  } n{0, UINTPTR_MAX, 0};
  index_.ForEachOverlap(bs, be, [&n, &u, &compatible](uintptr_t s, uintptr_t e, Region* r) {
    if (!compatible(r)) return;
    if (e <= u.s && e > n.below_end) {
      n.below_end = e;
      n.local |= r->reg.access & kAccessLocalWrite;
    } else if (s >= u.e && s < n.above_start) {
      n.above_start = s;
      n.local |= r->reg.access & kAccessLocalWrite;
    }
  });
  if (n.below_end == 0 && n.above_start == UINTPTR_MAX) return plan;
  plan.block_start = bs;
  plan.block_end = be;
  plan.below_end = n.below_end;
  plan.above_start = n.above_start;
  plan.bridge_local = n.local;
  return plan;
}

size_t CacheImpl::PinBudgetBytes() const {
  if (budget_ == nullptr) return 0;
  size_t b = budget_->budget();
  if (config_.max_bytes != 0 && (b == 0 || config_.max_bytes < b)) b = config_.max_bytes;
  return b;
}

size_t CacheImpl::FitPlanLocked(MissPlan* plan, uintptr_t exact_start, uintptr_t exact_end,
                                DeadList* dead) {
  const size_t budget = ProcessBudget();
  if (budget == 0) return 0;
  // The most the plan may register: bridging stays within its block.
  uintptr_t s = plan->start, e = plan->end;
  if (plan->has_block()) {
    if (plan->block_start < s) s = plan->block_start;
    if (plan->block_end > e) e = plan->block_end;
  }
  size_t need = e - s;
  const size_t exact = exact_end - exact_start;
  if (need > budget && need > exact) {
    *plan = MissPlan{exact_start, exact_end, 0};
    need = exact;
  }
  // Exact pages beyond the budget are still tried (the headroom may hold
  // them), but evicting for them would empty the cache for a likely refusal.
  if (need > budget) return 0;
  const size_t pinned = budget_->pinned();
  if (pinned + need <= budget) return 0;
  if (need > exact) {
    // A full budget: widening would evict regions worth more than the
    // union's reuse (merging and bridging switch off), so register the
    // requested pages only.
    *plan = MissPlan{exact_start, exact_end, 0};
    need = exact;
    if (pinned + need <= budget) return 0;
  }
  size_t missing = pinned + need - budget;
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
  size_t released = WaitForAllDeregistrations();
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

absl::Status CacheImpl::OutOfPinnedMemory(uintptr_t start, uintptr_t end,
                                          const absl::Status& cause) {
  size_t in_use = 0;
  {
    MutexLock lock(&mu_);
    struct Sum {
      const CacheImpl* self;
      size_t bytes;
    } sum{this, 0};
    index_.ForEach([&sum](uintptr_t s, uintptr_t e, Region* r) {
      sum.self->mu_.AssertHeld();  // ForEach runs under the lock taken above
      if (sum.self->TotalRefsLocked(r) > 0) sum.bytes += e - s;
    });
    in_use = sum.bytes;
  }
  const size_t limit = budget_ != nullptr ? budget_->limit() : 0;
  const std::string limit_text =
      limit != 0 ? absl::StrCat("RLIMIT_MEMLOCK is ", limit, " bytes, the pin budget ",
                                PinBudgetBytes(), " bytes")
                 : std::string("RLIMIT_MEMLOCK does not apply (unlimited, or CAP_IPC_LOCK)");
  return ErrnoStatus(
      StatusToErrno(cause),
      absl::StrCat("mrc_get: cannot pin ", end - start, " bytes at 0x", absl::Hex(start), ": ",
                   limit_text, "; mrcache pins ",
                   budget_ != nullptr ? budget_->pinned() : pinned_bytes_.load(),
                   " bytes in this process, ", in_use, " of them in regions in use by this cache (",
                   registrar_->name(), ": ", cause.message(), ")"));
}

bool CacheImpl::InvalidatedLatelyLocked(uintptr_t start, uintptr_t end, uint64_t now) const {
  return invalidated_.Recent(start, end, now, kMergeCooldownMisses);
}

bool CacheImpl::BridgeOutsideLock(const MissPlan& plan, uintptr_t* start, uintptr_t* end) const {
  // Widen over the resident memory of the union's own mapping(s), within the
  // block; worth it only if that reaches a neighbouring region.
  const uintptr_t ps = AlignDown(plan.start, page_);
  const uintptr_t pe = AlignUp(plan.end, page_);
  if (pe == 0) return false;
  // First the cheap test (mincore over the gaps): unless resident memory
  // reaches a neighbour, bridging cannot pay, and /proc/self/maps (tens of
  // microseconds in a large process) is not read.
  bool reaches = false;
  if (plan.below_end > ps) {
    reaches = true;  // the neighbour shares the union's first page
  } else if (plan.below_end != 0) {
    uintptr_t limit = AlignDown(plan.below_end - 1, page_);
    if (limit < plan.block_start) limit = plan.block_start;
    reaches = ResidentStart(ps, limit, page_) < plan.below_end;
  }
  if (!reaches && plan.above_start < pe) {
    reaches = true;  // shares the union's last page
  } else if (!reaches && plan.above_start != UINTPTR_MAX) {
    uintptr_t limit = AlignUp(plan.above_start + 1, page_);
    if (limit == 0 || limit > plan.block_end) limit = plan.block_end;
    reaches = ResidentEnd(pe, limit, page_) > plan.above_start;
  }
  if (!reaches) return false;
  MappingExtent mapping;
  if (!FindMappingExtent(ps, pe - 1, &mapping)) return false;
  const uintptr_t lo = mapping.start > plan.block_start ? mapping.start : plan.block_start;
  const uintptr_t hi = mapping.end < plan.block_end ? mapping.end : plan.block_end;
  if (lo > ps || hi < pe) return false;
  const uintptr_t rs = ResidentStart(ps, lo, page_);
  const uintptr_t re = ResidentEnd(pe, hi, page_);
  if (!(rs < plan.below_end || re > plan.above_start)) return false;
  *start = rs < plan.start ? rs : plan.start;
  *end = re > plan.end ? re : plan.end;
  return true;
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

void CacheImpl::InvalidateRangeLocked(uintptr_t start, uintptr_t end, Region** candidates) {
  // Regions start and end on multiples of align_ (or of the page size, when
  // registering fell back to exact pages), so rounding the range to the finer
  // of the two finds every region that overlaps it. Of those, a region is
  // dropped if the range overlaps its used bytes or spans a whole page of it
  // (see Region::used_start): a mapping changes a whole page at a time.
  const size_t fine = align_ < page_ ? align_ : page_;
  uintptr_t s = AlignDown(start, fine);
  uintptr_t e = AlignUp(end, fine);
  if (e == 0) e = UINTPTR_MAX;
  uintptr_t whole_start = AlignUp(start, page_);
  if (whole_start == 0) whole_start = UINTPTR_MAX;  // no whole page above start
  const uintptr_t whole_end = end == UINTPTR_MAX ? UINTPTR_MAX : AlignDown(end, page_);
  struct Collect {
    Region* list;
    uintptr_t start, end, whole_start, whole_end;
  } c{nullptr, start, end, whole_start, whole_end};
  index_.ForEachOverlap(s, e, [&c](uintptr_t rs, uintptr_t re, Region* r) {
    bool touches_used = r->used_start < c.end && c.start < r->used_end;
    bool spans_a_page = c.whole_start < c.whole_end && rs < c.whole_end && c.whole_start < re;
    if (!touches_used && !spans_a_page) return;
    r->next_dead = c.list;
    c.list = r;
  });
  uintptr_t dropped_start = UINTPTR_MAX, dropped_end = 0;
  while (c.list != nullptr) {
    Region* r = c.list;
    c.list = r->next_dead;
    invalidations_.fetch_add(1, std::memory_order_relaxed);
    if (r->start < dropped_start) dropped_start = r->start;
    if (r->end > dropped_end) dropped_end = r->end;
    UnindexLocked(r, candidates);
  }
  if (dropped_start < dropped_end) {
    invalidated_.Mark(start > dropped_start ? start : dropped_start,
                      end < dropped_end ? end : dropped_end,
                      misses_.load(std::memory_order_relaxed));
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
  return !eviction_->AdmitsToFullCache(miss.page_start / page_, miss.page_end / page_);
}

// ---- outside the lock ------------------------------------------------------

absl::StatusOr<Registration> CacheImpl::TimedRegister(uintptr_t start, uintptr_t end, int access,
                                                      uint64_t* ticks) {
  const uint64_t t0 = NowTicks(tsc_ticks_);
  absl::StatusOr<Registration> reg =
      registrar_->Register(reinterpret_cast<void*>(start), end - start, access);
  const uint64_t took = AddTicksSince(registrar_ticks_, t0, tsc_ticks_);
  if (ticks != nullptr) {
    *ticks = took;  // the caller records it
  } else {
    histograms_.register_ns.Add(TicksToNs(took));
  }
  if (reg.ok() && budget_ != nullptr && !(reg->access & kAccessOnDemand)) {
    budget_->AddPinned(reg->length);
    budget_->Accepted(reg->length);
  }
  return reg;
}

uint64_t CacheImpl::StartMissTiming() const {
  // Threads that miss at once may read the same count: a few more or fewer
  // misses are sampled then, still none chosen by what they ask for.
  if (misses_.load(std::memory_order_relaxed) % kHistogramSampleEvery != 0) return 0;
  return NowTicks(tsc_ticks_);
}

uint64_t CacheImpl::SampledTicksToNs(uint64_t ticks) const {
  // Signed conversions are one instruction each; a latency is far below 2^63
  // ticks or nanoseconds.
  return static_cast<uint64_t>(
      static_cast<int64_t>(static_cast<double>(static_cast<int64_t>(ticks)) * ns_per_tick_));
}

uint64_t CacheImpl::SampledMissNs(uint64_t t0) const {
  const uint64_t t1 = NowTicks(tsc_ticks_);
  return t1 > t0 ? SampledTicksToNs(t1 - t0) : 0;
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
  locked_histograms_.register_ns.Add(SampledTicksToNs(attempt.register_ticks));
  locked_histograms_.get_bytes.Add(requested);
}

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

bool CacheImpl::CountRegistrationSampled(size_t pinned) {
  const uint64_t before = registrations_.fetch_add(1, std::memory_order_relaxed);
  AtomicMax(peak_pinned_bytes_,
            pinned_bytes_.fetch_add(pinned, std::memory_order_relaxed) + pinned);
  // The implicit ODP region (pinned 0) covers no range: it has no size.
  return __builtin_expect(before % kHistogramSampleEvery == 0, 0) && pinned != 0;
}

void CacheImpl::CountRegistration(size_t pinned) {
  if (CountRegistrationSampled(pinned)) CountRegionBytes(pinned);
}

void CacheImpl::CountRegionBytes(size_t bytes) { histograms_.region_bytes.Add(bytes); }

void CacheImpl::CountRegistrationLocked(size_t pinned) {
  if (CountRegistrationSampled(pinned)) CountRegionBytesLocked(pinned);
}

void CacheImpl::CountRegionBytesLocked(size_t bytes) { locked_histograms_.region_bytes.Add(bytes); }

void CacheImpl::CountDeregistrationNs(uint64_t ticks) {
  histograms_.deregister_ns.Add(SampledTicksToNs(ticks));
}

void CacheImpl::TimedDeregister(const Registration& reg) {
  const uint64_t t0 = NowTicks(tsc_ticks_);
  absl::Status s = registrar_->Deregister(reg);
  const uint64_t took = AddTicksSince(registrar_ticks_, t0, tsc_ticks_);
  if (__builtin_expect(
          deregistrations_.fetch_add(1, std::memory_order_relaxed) % kHistogramSampleEvery == 0,
          0)) {
    CountDeregistrationNs(took);
  }
  const bool implicit = ImplicitOdpRegions::Is(reg);
  pinned_bytes_.fetch_sub(implicit ? 0 : reg.length, std::memory_order_relaxed);
  if (!implicit && budget_ != nullptr && !(reg.access & kAccessOnDemand)) {
    budget_->SubPinned(reg.length);
  }
  if (!s.ok()) {
    Log(LogLevel::kError,
        absl::StrCat(registrar_->name(), " deregistration failed: ", s.message()));
  }
}

void CacheImpl::DeregisterDead(DeadList* dead) {
  if (dereg_lane_ != nullptr && dead->bytes >= config_.async_dereg_bytes &&
      DeregistrationQueue::Process().Push(dereg_lane_, dead->head, dead->count)) {
    dead->head = nullptr;
    dead->count = 0;
    dead->bytes = 0;
    return;
  }
  // async_dereg off, the queue full, or too few bytes to be worth handing
  // over: this thread's own victims.
  DeregisterDeadNow(dead);
}

void CacheImpl::DeregisterBeforeRegistering(DeadList* dead, size_t need) {
  const size_t budget = ProcessBudget();
  if (budget == 0 || budget_->pinned() + need <= budget) {
    Deregister(dead);
    return;
  }
  DeregisterNow(dead);
  if (dereg_lane_ != nullptr && budget_->pinned() + need > budget) WaitForAllDeregistrations();
}

void CacheImpl::WaitForDeregistrations() {
  if (dereg_lane_ == nullptr) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (DeregistrationQueue::Process().Drain(dereg_lane_)) CountDeregWaitSince(t0);
}

size_t CacheImpl::WaitForAllDeregistrations() {
  if (dereg_lane_ == nullptr) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  if (DeregistrationQueue::Process().DrainAll(&bytes)) CountDeregWaitSince(t0);
  return bytes;
}

void CacheImpl::CountDeregWaitSince(std::chrono::steady_clock::time_point t0) {
  const auto waited = std::chrono::steady_clock::now() - t0;
  dereg_wait_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count(),
                           std::memory_order_relaxed);
}

void CacheImpl::DeregisterQueued(Region* list) {
  if (InForkChild()) {
    FreeRegions(list);
    return;
  }
  DeadList dead;
  dead.head = list;
  DeregisterDeadNow(&dead);
}

void CacheImpl::DeregisterDeadNow(DeadList* dead) {
  if (__builtin_expect(has_retire_cb_.load(std::memory_order_acquire), 0)) {
    DeregisterDeadReporting(dead);
    return;
  }
  DeregisterEach(dead, nullptr);
}

void CacheImpl::DeregisterDeadReporting(DeadList* dead) {
  Cache::RetireCallback cb;
  {
    MutexLock lock(&mu_);
    cb = retire_cb_;
  }
  DeregisterEach(dead, cb ? &cb : nullptr);
}

void CacheImpl::DeregisterEach(DeadList* dead, const Cache::RetireCallback* cb) {
  // Deregister calls this with a region on the list: no test before the first.
  // Usually one region (an eviction), no watched ranges (only uffd watches)
  // and no retire callback.
  Region* r = dead->head;
  do {
    Region* next = r->next_dead;
    TimedDeregister(r->reg);
    if (__builtin_expect(watch_ranges_, 0) && !ImplicitOdpRegions::Is(r->reg)) {
      monitor_->Unwatch(reinterpret_cast<void*>(r->start), r->length());
    }
    if (__builtin_expect(cb != nullptr, 0)) {
      (*cb)(reinterpret_cast<void*>(r->start), r->length(), r->reg.handle);
    }
    Quarantine(r);
    r = next;
  } while (__builtin_expect(r != nullptr, 0));
  dead->head = nullptr;
  dead->count = 0;
  dead->bytes = 0;
}

void CacheImpl::Quarantine(Region* r) {
  Region* head = quarantine_.load(std::memory_order_relaxed);
  do {
    r->next_dead = head;
  } while (!quarantine_.compare_exchange_weak(head, r, std::memory_order_release,
                                              std::memory_order_relaxed));
  if (quarantined_.fetch_add(1, std::memory_order_relaxed) + 1 < kQuarantineBatch) return;
  Region* batch;
  {
    MutexLock lock(&mu_);
    batch = quarantine_.exchange(nullptr, std::memory_order_acquire);
    quarantined_.store(0, std::memory_order_relaxed);
    ++region_frees_;
    // Every lookup entry filled before now is void from here on: none can
    // name a Region of the batch when its memory is reused.
    BumpGenerationAndFence();
#ifndef MRCACHE_FREE_EVERY_REGION
    if (spare_regions_ == nullptr) {
      spare_regions_ = batch;  // the next misses' Regions
      batch = nullptr;
    } else if (spare_batch_ == nullptr) {
      spare_batch_ = batch;  // theirs after those
      batch = nullptr;
    }
#endif
  }
  FreeRegions(batch);
}

Region* CacheImpl::TakeSpareRegionLocked() {
  if (spare_regions_ == nullptr) {
    spare_regions_ = spare_batch_;
    spare_batch_ = nullptr;
  }
  Region* r = spare_regions_;
  if (r != nullptr) spare_regions_ = r->next_dead;
  return r;
}

Region* CacheImpl::ReuseRegion(Region* spare) {
  if (spare == nullptr) return new Region;  // with its index node
  spare->~Region();
  return new (spare) Region;
}

void CacheImpl::FreeRegions(Region* list) {
  while (list != nullptr) {
    Region* next = list->next_dead;
    delete list;
    list = next;
  }
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
