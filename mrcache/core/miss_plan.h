// miss_plan.h: what a miss registers -- its requested range merged with the
// compatible regions it overlaps, a bridge block that may widen it further
// over resident memory, and the fit of all that to the pin budget.
//
// Contract. MissPlanner answers from the index it is given (under the
// cache's lock) and from what it remembers of where widening did not pay:
// where regions died by invalidation lately (merging and bridging cool off
// there, address_heat.h), where bridging found nothing or failed, and
// whether regions keep dying by invalidation at all (address_churn.h). It
// changes nothing of the cache: FitToBudget says how many bytes are missing,
// the cache evicts them. Widening is bounded by max_merge_bytes, by the
// registrar's longest region and, under a pin budget, by a share of the
// budget (a quarter for a union that only absorbs regions whose requested
// bytes the request covers, a sixteenth for one that joins other requests'
// bytes, which is evicted as one region: bench/RESULTS.md, "Joining
// neighbours under the budget").
//
// Not thread-safe: the cache guards it with its lock, held for writing for
// every method. BridgeOverResidentMemory is the part without the lock.
#ifndef MRCACHE_CORE_MISS_PLAN_H_
#define MRCACHE_CORE_MISS_PLAN_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mrcache/core/address_churn.h"
#include "mrcache/core/address_heat.h"
#include "mrcache/core/interval_tree.h"
#include "mrcache/core/miss.h"
#include "mrcache/core/region.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrcache {

class MissPlanner {
 public:
  // What plans are bounded by, and the cache's counters they read (time is
  // the cache's miss count).
  struct Settings {
    size_t page = 0;
    size_t max_merge_bytes = 0;  // config.h
    size_t bridge_bytes = 0;     // config.h
    size_t max_bytes = 0;        // config.h
    // The registrar's longest region, 0 = none.
    size_t max_region = 0;
    // Whether a release of memory no request named is reported however it
    // happens (a complete monitor, or on-demand paging): only then bridges.
    bool bridging_safe = false;
    // The process's pin budget, null if regions pin nothing.
    const PinBudget* budget = nullptr;
    const std::atomic<uint64_t>* misses = nullptr;
    const std::atomic<uint64_t>* invalidations = nullptr;
  };

  // Once, before any other call.
  void Configure(const Settings& settings) { settings_ = settings; }

  // What the next attempt of `miss` registers before the budget is weighed:
  // the requested range, merged and with its bridge block if the miss
  // merges; MissPlan::overlapped says whether any region of `index`
  // overlaps the request.
  MissPlan Plan(const IntervalTree<Region*>& index, const Miss& miss);
  // Fits `plan` into the process budget beside the bytes pinned now: a
  // widened plan (merge, bridge, alignment) is kept only if it fits without
  // evicting, else narrowed to [exact_start, exact_end). Returns the bytes to
  // evict for it to fit, 0 if it fits or if even the exact pages exceed the
  // budget (they are tried anyway, without evicting).
  size_t FitToBudget(MissPlan* plan, uintptr_t exact_start, uintptr_t exact_end);

  // Regions died by invalidation in [start, end): no widening over it soon.
  void Invalidated(uintptr_t start, uintptr_t end) { invalidated_.Mark(start, end, Now()); }
  // Bridging over [start, end) found nothing resident or was refused: not
  // tried there again soon.
  void BridgeFailed(uintptr_t start, uintptr_t end) { bridge_failed_.Mark(start, end, Now()); }

 private:
  // Plans the merging miss of the aligned range [start, end): merging, then
  // bridging.
  MissPlan PlanMerged(const IntervalTree<Region*>& index, uintptr_t start, uintptr_t end,
                      int access);
  uint64_t Now() const { return settings_.misses->load(std::memory_order_relaxed); }
  size_t ProcessBudget() const {
    return settings_.budget != nullptr ? settings_.budget->budget() : 0;
  }

  Settings settings_;
  AddressHeat invalidated_;    // where regions died by invalidation
  AddressHeat bridge_failed_;  // where bridging found nothing or failed
  // Whether regions keep dying by invalidation: under a pin budget, merge
  // unions join other requests' bytes only while they do not.
  AddressChurn churn_;
};

// Without the cache's lock: widens a plan with a bridge block over the
// resident memory of the union's own mapping(s), within the block, into
// [*start, *end); false (nothing changed) unless that reaches a neighbouring
// region. `page`: the page size.
bool BridgeOverResidentMemory(const MissPlan& plan, size_t page, uintptr_t* start, uintptr_t* end);

}  // namespace mrcache

#endif  // MRCACHE_CORE_MISS_PLAN_H_
