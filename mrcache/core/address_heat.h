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
// Time is the cache's miss count: Mark(range, now) stamps the range;
// Recent(range, now, window) is true if a stamp it reads was set within the
// last `window` misses. The address space is cut into granules at three
// levels (64 KiB, 2 MiB, 128 MiB), each hashed into a fixed table of stamps
// by its address modulo 64 GiB (hashed_address.h), so that runs whose
// buffers lie alike modulo 64 GiB get the same answers.
// Mark stamps the range's granules at every level (marks are rare: an
// invalidation, a failed widening); Recent, on every miss that may widen,
// reads the finest level where the range spans at most kMaxGranules, so a
// miss's union is judged at 64 KiB, a bridging block (128 MiB by default, and
// aligned to its size) at 2 MiB or 128 MiB, and no query reads more than
// kMaxGranules stamps. Coarser granules and hash collisions only make
// Recent() answer true more often (less widening), never less: the map
// steers a heuristic, and no correctness decision depends on it.
//
// Invariants: fixed size, no allocation; a call touches at most the number
// of stamps of a level per level. Not thread-safe: the cache calls it under
// its lock.
#ifndef MRCACHE_ADDRESS_HEAT_H_
#define MRCACHE_ADDRESS_HEAT_H_

#include <cstddef>
#include <cstdint>

#include "mrcache/core/hashed_address.h"

namespace mrcache {

class AddressHeat {
 public:
  static constexpr int kLevels = 3;
  static constexpr int kGranuleShift[kLevels] = {16, 21, 27};  // 64 KiB, 2 MiB, 128 MiB
  static constexpr size_t kSlotsShift[kLevels] = {12, 10, 8};  // 4,096, 1,024, 256 stamps
  static constexpr uintptr_t kMaxGranules = 16;

  void Mark(uintptr_t start, uintptr_t end, uint64_t now) {
    if (end <= start) return;
    for (int level = 0; level < kLevels; ++level) {
      ForEachStamp(Stamps(level), level, start, end, [now](uint64_t& stamp) {
        stamp = now + 1;  // 0 = never
        return false;
      });
    }
  }

  bool Recent(uintptr_t start, uintptr_t end, uint64_t now, uint64_t window) const {
    if (end <= start) return false;
    int level = 0;
    while (level < kLevels - 1 && Granules(level, start, end) > kMaxGranules) ++level;
    bool recent = false;
    ForEachStamp(Stamps(level), level, start, end, [now, window, &recent](uint64_t stamp) {
      recent = stamp != 0 && now + 1 - stamp < window;
      return recent;
    });
    return recent;
  }

 private:
  static uintptr_t Granules(int level, uintptr_t start, uintptr_t end) {
    return ((end - 1) >> kGranuleShift[level]) - (start >> kGranuleShift[level]) + 1;
  }

  // Calls f(stamp) for the stamp of every granule of [start, end) (end >
  // start) among `stamps`, those of `level` (each slot at most once when the
  // range has more granules than the level has slots) until f returns true.
  template <typename Stamp, typename F>
  static void ForEachStamp(Stamp* stamps, int level, uintptr_t start, uintptr_t end, F f) {
    const size_t slots = size_t{1} << kSlotsShift[level];
    const uintptr_t first = start >> kGranuleShift[level];
    const uintptr_t count = Granules(level, start, end);
    if (count >= slots) {
      for (size_t i = 0; i < slots; ++i) {
        if (f(stamps[i])) return;
      }
      return;
    }
    for (uintptr_t g = first; g < first + count; ++g) {
      if (f(stamps[Hash(level, g)])) return;
    }
  }
  uint64_t* Stamps(int level) { return stamps_ + kFirstSlot[level]; }
  const uint64_t* Stamps(int level) const { return stamps_ + kFirstSlot[level]; }

  // The slot of a granule of `level`: its number modulo the granules of
  // 2^kHashedAddressBits, hashed. Every level has more such granules than
  // slots, so a range that ForEachStamp walks granule by granule (fewer
  // than the slots) names no granule twice.
  static size_t Hash(int level, uintptr_t granule) {
    const uint64_t key = HashedUnit(granule, kGranuleShift[level]);
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kSlotsShift[level]));
  }
  static_assert(kLevels == 3 && size_t(kHashedAddressBits - kGranuleShift[0]) > kSlotsShift[0] &&
                    size_t(kHashedAddressBits - kGranuleShift[1]) > kSlotsShift[1] &&
                    size_t(kHashedAddressBits - kGranuleShift[2]) > kSlotsShift[2],
                "every level has more granules modulo 2^kHashedAddressBits than slots");

  // Every level's stamps in one array, level after level: level L's
  // 1 << kSlotsShift[L] start at kFirstSlot[L].
  static constexpr size_t kFirstSlot[kLevels] = {
      0, size_t{1} << kSlotsShift[0],
      (size_t{1} << kSlotsShift[0]) + (size_t{1} << kSlotsShift[1])};
  static constexpr size_t kSlots =
      kFirstSlot[kLevels - 1] + (size_t{1} << kSlotsShift[kLevels - 1]);
  uint64_t stamps_[kSlots] = {};
};

}  // namespace mrcache

#endif  // MRCACHE_ADDRESS_HEAT_H_
