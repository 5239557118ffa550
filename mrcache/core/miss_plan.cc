// miss_plan.cc: merging, bridging and fitting a miss's plan to the pin
// budget (miss_plan.h).
#include "mrcache/core/miss_plan.h"

#include "mrcache/core/range.h"
#include "mrcache/core/residency.h"
#include "mrcache/monitors/mapping_bounds.h"
#include "mrcache/registrar.h"

namespace mrcache {
namespace {

// A miss widens beyond its own pages (merging) only where no region died by
// invalidation within this many misses (see address_heat.h).
constexpr uint64_t kMergeCooldownMisses = 4096;

// Under a pin budget, the largest share of it a widened region may take
// (MissPlanner::PlanMerged): one that only absorbs regions whose requested bytes the
// request covers, and one that joins other requests' bytes.
constexpr size_t kAbsorbingShare = 4;
constexpr size_t kJoiningShare = 16;

}  // namespace

MissPlan MissPlanner::Plan(const IntervalTree<Region*>& index, const Miss& miss) {
  // Merging is on by default (config.h: max_merge_bytes).
  if (__builtin_expect(miss.allow_merge, 1)) {
    return PlanMerged(index, miss.plan_start, miss.plan_end, miss.access);
  }
  MissPlan plan{miss.plan_start, miss.plan_end, 0};
  bool overlapped = false;
  index.ForEachOverlap(miss.plan_start, miss.plan_end,
                       [&overlapped](uintptr_t, uintptr_t, Region*) { overlapped = true; });
  plan.overlapped = overlapped;
  return plan;
}

MissPlan MissPlanner::PlanMerged(const IntervalTree<Region*>& index, uintptr_t start, uintptr_t end,
                                 int access) {
  const int remote = access & kAccessRemoteBits;
  auto compatible = [access](const Region* r) { return MergeCompatible(r->reg.access, access); };
  const uint64_t now = Now();
  // Asked on every plan, so that its windows stay near kWindowMisses.
  const bool churning =
      churn_.Churning(now, settings_.invalidations->load(std::memory_order_relaxed));
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
  index.ForEachOverlap(start, end, [&](uintptr_t s, uintptr_t e, Region* r) {
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
    const size_t merge =
        settings_.max_region != 0 && settings_.max_region < settings_.max_merge_bytes
            ? settings_.max_region
            : settings_.max_merge_bytes;
    return budget != 0 && budget / share < merge ? budget / share : merge;
  };
  const size_t widen_cap = cap(joins ? kJoiningShare : kAbsorbingShare);
  if (u.e - u.s > widen_cap ||
      (widens && invalidated_.Recent(u.s, u.e, now, kMergeCooldownMisses))) {
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
  // BridgeOverResidentMemory then decides how far the registration really widens.
  // Bridging registers memory no request named, so some release of it must
  // be reported however it happens: only with a complete monitor, or with
  // on-demand paging (whose regions cannot go stale). Never with remote
  // rights: their rkey would reach memory no remote request named.
  if (!settings_.bridging_safe || remote != 0) return plan;
  size_t block = settings_.bridge_bytes < settings_.max_merge_bytes ? settings_.bridge_bytes
                                                                    : settings_.max_merge_bytes;
  if (settings_.max_bytes != 0 && block > settings_.max_bytes / 4) block = settings_.max_bytes / 4;
  if (budget != 0 && block > budget / 4) {
    block = budget / 4;
    while (block & (block - 1)) block &= block - 1;  // the largest power of two within
  }
  if (settings_.max_region != 0 && block > settings_.max_region) {
    block = settings_.max_region;
    while (block & (block - 1)) block &= block - 1;
  }
  if (block < 2 * settings_.page || (block & (block - 1)) != 0) return plan;
  const uintptr_t bs = AlignDown(u.s, block);
  const uintptr_t be = AlignUp(u.e, block);
  if (be == 0 || be - bs > cap(kAbsorbingShare)) return plan;
  // The cheap refusals first: the scan below visits every region of the
  // block, thousands in a large cache.
  if (invalidated_.Recent(bs, be, now, kMergeCooldownMisses) ||
      bridge_failed_.Recent(bs, be, now, kMergeCooldownMisses)) {
    return plan;
  }
  struct Neighbours {
    uintptr_t below_end, above_start;
    int local;
  } n{0, UINTPTR_MAX, 0};
  index.ForEachOverlap(bs, be, [&n, &u, &compatible](uintptr_t s, uintptr_t e, Region* r) {
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

size_t MissPlanner::FitToBudget(MissPlan* plan, uintptr_t exact_start, uintptr_t exact_end) {
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
  const size_t pinned = settings_.budget->pinned();
  if (pinned + need <= budget) return 0;
  if (need > exact) {
    // A full budget: widening would evict regions worth more than the
    // union's reuse (merging and bridging switch off), so register the
    // requested pages only.
    *plan = MissPlan{exact_start, exact_end, 0};
    need = exact;
    if (pinned + need <= budget) return 0;
  }
  return pinned + need - budget;
}

bool BridgeOverResidentMemory(const MissPlan& plan, size_t page, uintptr_t* start, uintptr_t* end) {
  // Widen over the resident memory of the union's own mapping(s), within the
  // block; worth it only if that reaches a neighbouring region.
  const uintptr_t ps = AlignDown(plan.start, page);
  const uintptr_t pe = AlignUp(plan.end, page);
  if (pe == 0) return false;
  // First the cheap test (mincore over the gaps): unless resident memory
  // reaches a neighbour, bridging cannot pay, and /proc/self/maps (tens of
  // microseconds in a large process) is not read.
  bool reaches = false;
  if (plan.below_end > ps) {
    reaches = true;  // the neighbour shares the union's first page
  } else if (plan.below_end != 0) {
    uintptr_t limit = AlignDown(plan.below_end - 1, page);
    if (limit < plan.block_start) limit = plan.block_start;
    reaches = ResidentStart(ps, limit, page) < plan.below_end;
  }
  if (!reaches && plan.above_start < pe) {
    reaches = true;  // shares the union's last page
  } else if (!reaches && plan.above_start != UINTPTR_MAX) {
    uintptr_t limit = AlignUp(plan.above_start + 1, page);
    if (limit == 0 || limit > plan.block_end) limit = plan.block_end;
    reaches = ResidentEnd(pe, limit, page) > plan.above_start;
  }
  if (!reaches) return false;
  MappingExtent mapping;
  if (!FindMappingExtent(ps, pe - 1, &mapping)) return false;
  const uintptr_t lo = mapping.start > plan.block_start ? mapping.start : plan.block_start;
  const uintptr_t hi = mapping.end < plan.block_end ? mapping.end : plan.block_end;
  if (lo > ps || hi < pe) return false;
  const uintptr_t rs = ResidentStart(ps, lo, page);
  const uintptr_t re = ResidentEnd(pe, hi, page);
  if (!(rs < plan.below_end || re > plan.above_start)) return false;
  *start = rs < plan.start ? rs : plan.start;
  *end = re > plan.end ? re : plan.end;
  return true;
}

}  // namespace mrcache
