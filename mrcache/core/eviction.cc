// eviction.cc: ClockEviction (eviction.h states the policy).
#include "mrcache/core/eviction.h"

namespace mrcache {

ClockEviction::ClockEviction(size_t max_regions)
    : admission_(max_regions >= kAdmissionMinRegions),
      seen_misses_(AdmissionBits(max_regions), kAdmissionWindow * max_regions) {}

size_t ClockEviction::AdmissionBits(size_t max_regions) {
  // 16 bits per remembered miss in each bitset (about 1 in 10 unseen page
  // ranges taken as seen), at most kAdmissionMaxBits; the smallest filter
  // where admission is off.
  if (max_regions < kAdmissionMinRegions) return 64;
  const size_t bits = 16 * kAdmissionWindow * max_regions;
  return bits < kAdmissionMaxBits ? bits : kAdmissionMaxBits;
}

void ClockEviction::Clear() {
  lru_head_ = lru_tail_ = nullptr;
  unreused_.Clear();
}

Region* ClockEviction::LargestUnused(Region* tail, Pass* pass) {
  // Only the size classes above the tail's are searched: every region
  // there weighs more than the tail, and each one visited is either taken
  // or sent to the head (out of unreused_), so an eviction visits O(1)
  // regions on average however many share a class. Within the tail's own
  // class (weights within 25%) the tail, the oldest, goes.
  const int above_tail = SizeClassLists<Region>::ClassOf(Weight(tail)) + 1;
  Region* larger = unreused_.ForEachFromLargest(above_tail, [this, pass](Region* c) {
    if (pass->use->UnusedSincePlaced(c)) return true;
    // Used since it was installed: what a pass does at the tail.
    if (c->periods_used < kMaxPeriodsUsed) ++c->periods_used;
    PlaceUsed(c, pass->tick);  // leaves unreused_
    return false;
  });
  return larger != nullptr ? larger : tail;
}

bool ClockEviction::AdmitsToFullCache(uint64_t first_page, uint64_t end_page) {
  if (!admission_) return true;
  return seen_misses_.TestAndSet(first_page * 0x100000001B3ull ^ end_page);
}

std::unique_ptr<EvictionPolicy> MakeDefaultEvictionPolicy(size_t max_regions) {
  return std::make_unique<ClockEviction>(max_regions);
}

}  // namespace mrcache
