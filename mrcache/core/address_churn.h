// address_churn.h: whether the cache's regions keep dying by invalidation,
// as a verdict over windows of misses.
//
// Under a pin budget, a merge union that joins other requests' bytes is one
// region holding several buffers' pages: it stays pinned while any of them is
// used, and goes with the first of them to be freed. Where buffers live long
// (pools, key-value slabs, tensors) that trade wins hits; where they are
// freed and reallocated all the time it keeps dead bytes pinned in place of
// live ones, and measured over many layouts it loses hits against not
// joining at all (bench/RESULTS.md, "Joining only where regions live").
// The two cases differ in how often cached regions die by invalidation, which
// the cache counts anyway: this class turns the two running counts into a
// verdict.
//
// Time is the cache's miss count. The misses are cut into windows of at
// least kWindowMisses; when a window ends, the address space is found to be
// churning if at least one region died by invalidation per kMissesPerDeath
// misses in it. The verdict holds until the next window ends. Before the
// first window ends there is no evidence, and the verdict is "churning": a
// cache joins nothing until it has seen its regions survive.
//
// Invariants: window_start_misses_ <= the misses passed to Churning() (the
// counts only grow); the verdict changes only when a window ends. Not
// thread-safe: the cache calls it under its lock.
#ifndef MRCACHE_CORE_ADDRESS_CHURN_H_
#define MRCACHE_CORE_ADDRESS_CHURN_H_

#include <cstdint>

namespace mrcache {

class AddressChurn {
 public:
  static constexpr uint64_t kWindowMisses = 256;
  static constexpr uint64_t kMissesPerDeath = 8;

  // The verdict, given the cache's running totals of misses and of regions
  // dropped by invalidation (both only grow). Ends the current window first
  // if it holds kWindowMisses misses or more.
  bool Churning(uint64_t misses, uint64_t invalidated) {
    const uint64_t window = misses - window_start_misses_;
    if (window >= kWindowMisses) {
      churning_ = (invalidated - window_start_invalidated_) * kMissesPerDeath >= window;
      window_start_misses_ = misses;
      window_start_invalidated_ = invalidated;
    }
    return churning_;
  }

 private:
  uint64_t window_start_misses_ = 0;
  uint64_t window_start_invalidated_ = 0;
  bool churning_ = true;  // no window has ended: no evidence yet
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_ADDRESS_CHURN_H_
