// bypass.h: the state of the gets the cache serves without caching a region
// for them: odp=implicit's whole-address-space regions (ImplicitOdpRegions)
// and the oversized misses' second sight (OversizedSeen). The registrations
// themselves (and their counting) are the cache's (CacheImpl::AcquireBypass,
// AcquireImplicitOdp, AcquireOversized); these classes keep what the cache
// must remember between gets, and call nothing.
#ifndef MRCACHE_CORE_BYPASS_H_
#define MRCACHE_CORE_BYPASS_H_

#include <atomic>
#include <cstdint>

#include "mrcache/core/range.h"
#include "mrcache/core/region.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/odp.h"

namespace mrcache {

// odp=implicit: one registration of the whole address space per set of
// remote rights (so that its rkey grants exactly what was asked), made on
// first use, and the references got through each. Lock-free: a region is
// published once (Publish) and stays until the cache is destroyed (TakeAll).
class ImplicitOdpRegions {
 public:
  // The set of remote rights `access` asks for: 0 .. kSets - 1.
  static constexpr int kSets = 8;
  static int SetOf(int access) { return (access & kAccessRemoteBits) >> 1; }

  // The region of access's set, or nullptr if none is published yet.
  Region* Find(int access) const { return regions_[SetOf(access)].load(std::memory_order_acquire); }
  // Publishes r as the region of access's set unless another thread did
  // first; returns the region published (r, or the other thread's).
  Region* Publish(int access, Region* r) {
    Region* expected = nullptr;
    if (regions_[SetOf(access)].compare_exchange_strong(expected, r, std::memory_order_acq_rel)) {
      return r;
    }
    return expected;
  }
  // A get through r (a published region): one reference more.
  void CountGet(const Region* r) {
    refs_[SetOf(r->reg.access)].fetch_add(1, std::memory_order_relaxed);
  }
  // A put of r: one reference less, or false (and nothing changed) if r
  // holds none.
  bool CountPut(const Region* r) {
    std::atomic<int64_t>& refs = refs_[SetOf(r->reg.access)];
    if (refs.fetch_sub(1, std::memory_order_relaxed) <= 0) {
      refs.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  // How many of the regions still hold references.
  int Held() const {
    int held = 0;
    for (const auto& refs : refs_) held += refs.load() > 0 ? 1 : 0;
    return held;
  }
  // Unpublishes every region, calling take(r) for each (the cache's end).
  template <typename Take>
  void TakeAll(Take take) {
    for (auto& slot : regions_) {
      if (Region* r = slot.exchange(nullptr)) take(r);
    }
  }

 private:
  std::atomic<Region*> regions_[kSets] = {};
  std::atomic<int64_t> refs_[kSets] = {};
};

// Under a pin budget, the pages of the last kSeen misses served uncached for
// their size: such pages are cached the next time (second sight), so that a
// large buffer reused soon stays registered. Not thread-safe: the cache
// calls it under its lock.
class OversizedSeen {
 public:
  static constexpr int kSeen = 4;

  // True if `pages` was among the last kSeen remembered (and forgets it);
  // else remembers it, forgetting the oldest, and returns false.
  bool SeenAgain(Range pages) {
    for (Range& seen : seen_) {
      if (seen == pages) {
        seen = Range{};
        return true;
      }
    }
    seen_[next_++ % kSeen] = pages;
    return false;
  }

 private:
  Range seen_[kSeen];
  unsigned next_ = 0;
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_BYPASS_H_
