// covering_hints.h: a cache-wide table of recent answers of the index, so
// that a locked hit among 10^5-10^6 regions usually reads one line instead
// of walking the interval tree (one cache miss per level).
//
// Direct-mapped: a get's start page hashes (Fibonacci hashing: the page
// times 2^64 / phi, top bits) to one Hint, which remembers the region that last answered a get
// there: its range, its registered access, the Region, and the cache's *index epoch* when it was
// filled. The cache bumps the epoch, under its write lock, every time a region leaves the index
// (CacheImpl::UnindexLocked), and fills and reads hints only with its lock held (for reading at
// least), so:
//   a hint whose epoch equals the current one names a region that was in
//   the index when the hint was filled and has not left it since: it is
//   alive, and answers any get it covers with compatible access.
// The Region is not read to decide that: the range and access are copied.
//
// Several readers of the cache lock may fill the same hint at once: each
// Hint is a seqlock (an odd `seq` while being written; a filler that finds
// it odd, or loses the race to make it odd, skips the fill; a reader that
// sees `seq` change or odd ignores the hint). Every field is an atomic, so
// a torn read is never undefined behaviour, only discarded.
//
// Size: one 64-byte Hint per line; the cache grows the table, outside its
// lock, to the power of two at or above its region count, from kMinLines
// once it holds that many regions up to kMaxLines (64 MiB), and swaps it
// in under the write lock. A cache with fewer regions has no table: its
// threads' own tables answer its gets (thread_cache.h).
#ifndef MRCACHE_CORE_COVERING_HINTS_H_
#define MRCACHE_CORE_COVERING_HINTS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "mrcache/core/region.h"

namespace mrcache {

class CoveringHints {
 public:
  static constexpr size_t kMinLines = 4096;             // 256 KiB
  static constexpr size_t kMaxLines = size_t{1} << 20;  // 64 MiB

  // The lines a cache of `regions` regions wants: 0 below kMinLines regions.
  static size_t LinesFor(size_t regions) {
    if (regions < kMinLines) return 0;
    size_t lines = kMinLines;
    while (lines < regions && lines < kMaxLines) lines *= 2;
    return lines;
  }

  CoveringHints() = default;
  // A table of `lines` empty hints (a power of two); aborts if memory is
  // exhausted, as new[] would.
  explicit CoveringHints(size_t lines);
  ~CoveringHints();
  CoveringHints(const CoveringHints&) = delete;
  CoveringHints& operator=(const CoveringHints&) = delete;
  void Swap(CoveringHints* other) {
    std::swap(lines_, other->lines_);
    std::swap(lines_count_, other->lines_count_);
    std::swap(shift_, other->shift_);
  }
  size_t lines() const { return lines_count_; }

  // The region of the hint for a get of [start, end) with `access`, if it
  // was filled at `epoch` and covers the get with compatible access; else
  // nullptr. The caller holds the cache lock (for reading at least).
  Region* Find(uintptr_t start, uintptr_t end, int access, uint64_t epoch) const {
    if (lines_ == nullptr) return nullptr;
    const Hint& h = lines_[Index(start)];
    const uint64_t seq = h.seq.load(std::memory_order_acquire);
    if (seq & 1) return nullptr;
    const uint64_t filled = h.epoch.load(std::memory_order_relaxed);
    const uintptr_t s = h.start.load(std::memory_order_relaxed);
    const uintptr_t e = h.end.load(std::memory_order_relaxed);
    const int have = h.access.load(std::memory_order_relaxed);
    Region* r = h.region.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.seq.load(std::memory_order_relaxed) != seq) return nullptr;
    if (filled != epoch || s > start || end > e || !AccessCompatible(have, access)) {
      return nullptr;
    }
    return r;
  }

  // Remembers that r (in the index at `epoch`) answered a get starting at
  // `start`. The caller holds the cache lock (for reading at least).
  void Fill(uintptr_t start, const Region* r, uint64_t epoch) const {
    if (lines_ == nullptr) return;
    Hint& h = lines_[Index(start)];
    uint64_t seq = h.seq.load(std::memory_order_relaxed);
    if ((seq & 1) || !h.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire,
                                                    std::memory_order_relaxed)) {
      return;  // another filler is writing it
    }
    h.epoch.store(epoch, std::memory_order_relaxed);
    h.start.store(r->start, std::memory_order_relaxed);
    h.end.store(r->end, std::memory_order_relaxed);
    h.access.store(r->reg.access, std::memory_order_relaxed);
    h.region.store(const_cast<Region*>(r), std::memory_order_relaxed);
    h.seq.store(seq + 2, std::memory_order_release);
  }

 private:
  struct alignas(64) Hint {
    std::atomic<uint64_t> seq{0};    // odd while a filler writes
    std::atomic<uint64_t> epoch{0};  // 0: empty (the cache's epoch starts at 1)
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
    std::atomic<Region*> region{nullptr};
    std::atomic<int> access{0};
  };
  static_assert(sizeof(Hint) == 64, "one hint per cache line");

  // The line of a get starting at `start`. Not ThreadCache::PageHash: that
  // one spreads strides over a table smaller than the working set, but
  // here, with a line per region, it leaves half the lines unused for
  // regions 64 KiB apart; the multiplicative hash uses 94% of them.
  size_t Index(uintptr_t start) const {
    return static_cast<size_t>(((start >> 12) * 0x9e3779b97f4a7c15ull) >> shift_);
  }

  Hint* lines_ = nullptr;
  size_t lines_count_ = 0;
  int shift_ = 64;  // 64 - log2(lines)
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_COVERING_HINTS_H_
