// cache_lifetime.cc: a cache's creation -- the config resolved against the
// registrar and the process (on-demand paging, the monitor, the pin budget,
// the deregistration queue), its components wired -- and its destruction,
// which deregisters what it still holds. The protocol (cache_impl.cc) never
// calls back here.
#include <unistd.h>

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mrcache/core/cache_impl.h"
#include "mrcache/core/dcheck.h"
#include "mrcache/core/tick_clock.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/registrars/odp.h"
#include "mrcache/registrars/region_limit.h"

namespace mrcache {
namespace {

std::atomic<uint64_t> g_next_cache_uid{1};

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
      tsc_ticks_(TickClockIsTsc()),
      ns_per_tick_(NsPerTick()),
      eviction_(eviction != nullptr ? std::move(eviction)
                                    : MakeDefaultEvictionPolicy(config.max_regions)),
      clock_(dynamic_cast<ClockEviction*>(eviction_.get())) {
  // Until Create knows the rest (the monitor, the budget, the queue's lane).
  timed_.Configure(TimedRegistrarSetup());
  dereg_.Configure(DeregistrationSetup(nullptr));
  bypass_.Configure(Bypass::Setup{&timed_, this});
}

TimedRegistrar::Setup CacheImpl::TimedRegistrarSetup() {
  TimedRegistrar::Setup setup;
  setup.registrar = registrar_.get();
  setup.budget = budget_;
  setup.tsc_ticks = tsc_ticks_;
  setup.register_ns = &histograms_.register_ns;
  setup.deregister_ns = &histograms_.deregister_ns;
  setup.region_bytes = &histograms_.region_bytes;
  setup.ns_per_tick = ns_per_tick_;
  return setup;
}

Deregistration::Setup CacheImpl::DeregistrationSetup(DeregistrationQueue::Lane* lane) {
  Deregistration::Setup setup;
  setup.registrar = &timed_;
  setup.monitor = monitor_.get();
  setup.watch_ranges = watch_ranges_;
  setup.budget = budget_;
  setup.lane = lane;
  setup.async_bytes = config_.async_dereg_bytes;
  setup.async_invalidated_bytes = config_.async_dereg_invalidated_bytes;
  return setup;
}

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
    auto first =
        cache->bypass_.ImplicitRegion(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
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
  cache->timed_.Configure(cache->TimedRegistrarSetup());
  // Deregistrations leave the critical path where they are costly: regions
  // that pin (auto), or wherever the config says on.
  DeregistrationQueue::Lane* lane = nullptr;
  if (config.async_dereg == AsyncDereg::kOn ||
      (config.async_dereg == AsyncDereg::kAuto && cache->budget_ != nullptr)) {
    lane = DeregistrationQueue::Process().Join(cache.get());
  }
  cache->dereg_.Configure(cache->DeregistrationSetup(lane));
  {
    MutexLock lock(&cache->mu_);
    MissPlanner::Settings plans;
    plans.page = cache->page_;
    plans.max_merge_bytes = config.max_merge_bytes;
    plans.bridge_bytes = config.bridge_bytes;
    plans.max_bytes = config.max_bytes;
    plans.max_region = cache->max_region_;
    plans.bridging_safe = cache->odp_ == OdpMode::kExplicit || cache->monitor_->complete();
    plans.budget = cache->budget_;
    plans.misses = &cache->misses_;
    plans.invalidations = &cache->invalidations_;
    cache->planner_.Configure(plans);
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
  DeregistrationQueue::Lane* const lane = dereg_.lane();
  if (lane != nullptr) {
    if (child) {
      FreeRegions(DeregistrationQueue::Process().TakeAll(lane));  // the parent's
    } else {
      dereg_.WaitForDeregistrations();
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
    held += bypass_.implicit().Held();
  }
  if (held > 0 && !child) {
    Log(LogLevel::kWarning,
        absl::StrCat("warning: destroying a cache while ", held,
                     " region(s) are still held; releasing their registrations"));
  }
  bypass_.implicit().TakeAll([&dead](Region* r) { dead.Push(r); });
  if (child) {
    // fork(): the registrations belong to the parent. Free our bookkeeping
    // only; never call the registrar, whose kernel objects the parent shares.
    FreeRegions(dead.head);
    (void)registrar_.release();  // owned by the parent's address space image
  } else {
    DeregisterNow(&dead);
  }
  if (lane != nullptr) DeregistrationQueue::Process().Leave(lane);
  FreeRegions(dereg_.TakeQuarantined());  // no thread uses the cache any more
  Region* spare;
  {
    MutexLock lock(&mu_);
    spare = spares_.TakeAll();
  }
  FreeRegions(spare);
}

}  // namespace mrcache
