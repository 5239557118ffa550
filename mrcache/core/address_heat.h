// address_heat.h: where something happened lately, by address.
//
// The cache keeps two of these maps to decide when widening a miss beyond the
// requested pages is worth it.
//  - Where its regions died by invalidation. Merging trades registrations for
//    exposure: a merged region spans several buffers, so freeing any of them
//    drops it, and the union is registered again on the next miss. Where
//    memory churns (a heap whose buffers are freed and reused) that trade is
//    lost; where it does not (a pool, long-lived buffers) it is won.
//  - Where widening was tried and failed (memory that cannot be registered,
//    or bridging found nothing resident to bridge), so it is not retried on
//    every miss.
//
// The address space is cut into 64 KiB granules, hashed into a fixed table of
// stamps. Time is the cache's miss count: Mark(range, now) stamps the range's
// granules; Recent(range, now, window) is true if one of them was stamped
// within the last `window` misses. Hash collisions only make Recent() answer
// true more often (less widening), never less: the map steers a heuristic,
// and no correctness decision depends on it.
//
// Invariants: fixed size (kSlots stamps), no allocation; touches at most
// kSlots stamps per call. Not thread-safe: the cache calls it under its lock.
#ifndef MRCACHE_ADDRESS_HEAT_H_
#define MRCACHE_ADDRESS_HEAT_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {

class AddressHeat {
 public:
  static constexpr int kGranuleShift = 16;  // 64 KiB
  static constexpr size_t kSlots = 4096;    // power of two

  void Mark(uintptr_t start, uintptr_t end, uint64_t now) {
    ForEachGranule(stamps_, start, end, [now](uint64_t& stamp) {
      stamp = now + 1;  // 0 = never
      return false;
    });
  }

  bool Recent(uintptr_t start, uintptr_t end, uint64_t now, uint64_t window) const {
    bool recent = false;
    ForEachGranule(stamps_, start, end, [now, window, &recent](const uint64_t& stamp) {
      recent = stamp != 0 && now + 1 - stamp < window;
      return recent;
    });
    return recent;
  }

 private:
  // Calls f(stamp) for the stamp of every granule of [start, end) (each slot
  // at most once when the range has more granules than slots) until f
  // returns true.
  template <typename Stamps, typename F>
  static void ForEachGranule(Stamps& stamps, uintptr_t start, uintptr_t end, F f) {
    if (end <= start) return;
    uintptr_t first = start >> kGranuleShift;
    uintptr_t last = (end - 1) >> kGranuleShift;
    uintptr_t count = last - first + 1;
    if (count >= kSlots || count == 0) {
      for (auto& stamp : stamps) {
        if (f(stamp)) return;
      }
      return;
    }
    for (uintptr_t g = first; g <= last; ++g) {
      if (f(stamps[Hash(g)])) return;
    }
  }

  static size_t Hash(uintptr_t granule) {
    return static_cast<size_t>((granule * 0x9E3779B97F4A7C15ull) >> 52) & (kSlots - 1);
  }

  uint64_t stamps_[kSlots] = {};
};

}  // namespace mrcache

#endif  // MRCACHE_ADDRESS_HEAT_H_
