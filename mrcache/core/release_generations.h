// release_generations.h: counters that memory releases bump, so that a
// lookup entry is voided by a release that overlaps its region and by no
// other (the validity rule in cache_impl.h).
//
// Three levels of buckets (2 MiB, 128 MiB and 8 GiB), kBuckets counters per
// level; an address's bucket at a level is (addr >> Shift(level)) mod
// kBuckets. A release bumps, at every level, the counter of every bucket the
// released range overlaps (Bump, hook context: no lock, no allocation). An
// entry uses the finest level at which its region's range lies in one bucket
// (LevelOf); a region that crosses an 8 GiB boundary gets no entry. Counters
// only grow. Lock-free: any thread reads, memory events write.
#ifndef MRCACHE_CORE_RELEASE_GENERATIONS_H_
#define MRCACHE_CORE_RELEASE_GENERATIONS_H_

#include <atomic>
#include <cstdint>

namespace mrcache {

class ReleaseGenerations {
 public:
  static constexpr int kLevels = 3;
  static constexpr uintptr_t kBuckets = 256;  // per level, a power of two
  static constexpr int Shift(int level) { return 21 + 6 * level; }

  // The finest level whose bucket holds all of [start, end) (end > start),
  // or kLevels if none does.
  static int LevelOf(uintptr_t start, uintptr_t end) {
    const uintptr_t differ = start ^ (end - 1);
    int level = 0;
    while (level < kLevels && (differ >> Shift(level)) != 0) ++level;
    return level;
  }

  // The counter of addr's bucket at `level` (< kLevels).
  const std::atomic<uint64_t>& Counter(int level, uintptr_t addr) const {
    return counters_[level * kBuckets + ((addr >> Shift(level)) & (kBuckets - 1))];
  }

  // Bumps the counter of every bucket [start, end) overlaps, at every level.
  void Bump(uintptr_t start, uintptr_t end) noexcept {
    if (end <= start) return;
    for (int level = 0; level < kLevels; ++level) {
      const int shift = Shift(level);
      const uintptr_t first = start >> shift;
      const uintptr_t span = ((end - 1) >> shift) - first;
      const uintptr_t n = span < kBuckets ? span + 1 : kBuckets;
      for (uintptr_t i = 0; i < n; ++i) {
        counters_[level * kBuckets + ((first + i) & (kBuckets - 1))].fetch_add(
            1, std::memory_order_acq_rel);
      }
    }
  }

 private:
  std::atomic<uint64_t> counters_[kLevels * kBuckets] = {};
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_RELEASE_GENERATIONS_H_
