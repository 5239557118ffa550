// covering_hints.h: a cache-wide table of recent answers of the index, so
// that a locked hit among 10^5-10^6 regions usually reads one or two lines
// instead of walking the interval tree (one cache miss per level).
//
// A Hint remembers a region that answered a get starting on some page: its
// range, its registered access, the Region, and the table's *epoch* when it
// was filled. Hints sit two to a 64-byte line; a get's start page hashes
// (multiplicative hashing, top bits; Fibonacci's multiplier and another) to
// two lines, so four hints may answer it. At one line per region, four
// choices keep nearly every region answered under random access (a
// simulation of 10^5 regions kept 99.98%; one hint per page would keep 64%,
// and each hint that does not answer costs a walk of the tree).
//
// When a region leaves the index, the cache (CacheImpl::UnindexLocked,
// under its write lock) calls Void: the region's hints all lie on the two
// lines of each page it spans, since a hint is keyed by the start of a get
// the region covers, and Void clears those naming it. A region of more than
// kMaxVoidPages pages is not swept: Void bumps the epoch instead, which
// voids every hint (and, once in 2^32 bumps, clears the table, so that an
// epoch never comes back while a hint still holds it). Hints are filled and
// read only with the cache lock held (for reading at least), so:
//   a hint whose epoch equals the current one names a region that was in
//   the index when the hint was filled and has not left it since: it is
//   alive, and answers any get it covers with compatible access.
// The Region is not read to decide that: the range and access are copied.
// A region's departure costs the other regions' hints nothing (unless it
// was larger than kMaxVoidPages), so a cache whose regions come and go
// (invalidations, evictions) keeps answering its other gets from hints.
//
// Several readers of the cache lock may fill the same hint at once: each
// Hint is a seqlock (an odd `seq` while being written; a filler that finds
// it odd, or loses the race to make it odd, skips the fill; a reader that
// sees `seq` change or odd ignores the hint). Every field is an atomic, so
// a torn read is never undefined behaviour, only discarded.
//
// Size: 64-byte lines; the cache grows the table, outside its lock, to the
// power of two at or above its region count, from kMinLines once it holds
// that many regions up to kMaxLines (64 MiB), and swaps it in under the
// write lock. A cache with fewer regions has no table: its threads' own
// tables answer its gets (thread_cache.h). A region of 4 GiB or more gets
// no hint (its length does not fit); the index answers it.
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
  // The largest region (in 4 KiB pages) whose hints Void sweeps: a sweep
  // reads two lines per page, and past this a new epoch costs less.
  static constexpr uintptr_t kMaxVoidPages = 64;

  // The lines a cache of `regions` regions wants: 0 below kMinLines regions.
  static size_t LinesFor(size_t regions) {
    if (regions < kMinLines) return 0;
    size_t lines = kMinLines;
    while (lines < regions && lines < kMaxLines) lines *= 2;
    return lines;
  }
  // The fewest regions for which LinesFor asks for more than `lines` (a
  // value LinesFor returned); SIZE_MAX once at kMaxLines. Lets a cache call
  // LinesFor only when its index has outgrown what it last asked for.
  static size_t RegionsToOutgrow(size_t lines) {
    const size_t next = lines == 0 ? kMinLines : lines + 1;
    return lines < kMaxLines ? next : SIZE_MAX;
  }

  CoveringHints() = default;
  // A table of `lines` empty lines (a power of two); aborts if memory is
  // exhausted, as new[] would.
  explicit CoveringHints(size_t lines);
  ~CoveringHints();
  CoveringHints(const CoveringHints&) = delete;
  CoveringHints& operator=(const CoveringHints&) = delete;
  void Swap(CoveringHints* other) {
    std::swap(lines_, other->lines_);
    std::swap(lines_count_, other->lines_count_);
    std::swap(shift_, other->shift_);
    std::swap(epoch_, other->epoch_);
  }
  size_t lines() const { return lines_count_; }

  // The region of a hint that covers a get of [start, end) with compatible
  // access, and its range in *region_start and *region_end (if given); else
  // nullptr. The caller holds the cache lock (for reading at least).
  Region* Find(uintptr_t start, uintptr_t end, int access, uintptr_t* region_start = nullptr,
               uintptr_t* region_end = nullptr) const {
    // Inline, so that a cache too small for a table (the usual one) pays a
    // test rather than a call.
    if (lines_ == nullptr) return nullptr;
    return FindInTable(start, end, access, region_start, region_end);
  }

  // Remembers that r, which is in the index, answered a get starting at
  // `start`: in one of the get's four hints that answers nothing, else in
  // one of them chosen by bits that change with every fill. The caller
  // holds the cache lock (for reading at least).
  void Fill(uintptr_t start, const Region* r) const {
    if (lines_ == nullptr || r->end - r->start > UINT32_MAX) return;
    const uintptr_t page = start >> 12;
    Line* first = &lines_[First(page)];
    Line* second = &lines_[Second(page)];
    Hint* candidates[4] = {&first->hints[0], &first->hints[1], &second->hints[0],
                           &second->hints[1]};
    Hint* h = nullptr;
    for (Hint* c : candidates) {
      if (c->epoch.load(std::memory_order_relaxed) != epoch_) {
        h = c;
        break;
      }
    }
    if (h == nullptr) {
      const uint32_t turn = candidates[0]->seq.load(std::memory_order_relaxed) >> 1;
      h = candidates[(turn ^ (reinterpret_cast<uintptr_t>(r) >> 6)) & 3];
    }
    uint32_t seq = h->seq.load(std::memory_order_relaxed);
    if ((seq & 1) || !h->seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire,
                                                     std::memory_order_relaxed)) {
      return;  // another filler is writing it
    }
    h->epoch.store(epoch_, std::memory_order_relaxed);
    h->start.store(r->start, std::memory_order_relaxed);
    h->length.store(static_cast<uint32_t>(r->end - r->start), std::memory_order_relaxed);
    h->access.store(r->reg.access, std::memory_order_relaxed);
    h->region.store(const_cast<Region*>(r), std::memory_order_relaxed);
    h->seq.store(seq + 2, std::memory_order_release);
  }

  // Makes every hint naming r (which leaves the index) answer nothing: the
  // hints on r's pages, or, if r spans more than kMaxVoidPages pages, every
  // hint (a new epoch). The caller holds the cache lock for writing, so that
  // no reader fills or reads a hint meanwhile.
  void Void(const Region* r) {
    if (lines_ == nullptr) return;
    const uintptr_t first = r->start >> 12, last = (r->end - 1) >> 12;
    if (last - first >= kMaxVoidPages) {
      VoidAll();
      return;
    }
    for (uintptr_t page = first; page <= last; ++page) {
      for (Line* line : {&lines_[First(page)], &lines_[Second(page)]}) {
        for (Hint& h : line->hints) {
          if (h.region.load(std::memory_order_relaxed) == r) {
            h.epoch.store(0, std::memory_order_relaxed);
            h.region.store(nullptr, std::memory_order_relaxed);
          }
        }
      }
    }
  }

 private:
  struct Hint {
    std::atomic<uint32_t> seq{0};    // odd while a filler writes
    std::atomic<uint32_t> epoch{0};  // 0: empty (epoch_ is never 0)
    std::atomic<uintptr_t> start{0};
    std::atomic<Region*> region{nullptr};
    std::atomic<uint32_t> length{0};  // the region's end - start
    std::atomic<int> access{0};
  };
  struct alignas(64) Line {
    Hint hints[2];
  };
  static_assert(sizeof(Line) == 64, "two hints per cache line");

  // The two lines of a get starting on `page` (start >> 12). Not
  // ThreadCache::PageHash: that one spreads strides over a table smaller
  // than the working set, but here, with a line per region, it leaves half
  // the lines unused for regions 64 KiB apart; multiplicative hashes use
  // 94% of them.
  size_t First(uintptr_t page) const {
    return static_cast<size_t>((page * 0x9e3779b97f4a7c15ull) >> shift_);
  }
  size_t Second(uintptr_t page) const {
    return static_cast<size_t>((page * 0xc2b2ae3d27d4eb4full) >> shift_);
  }

  // h's region if h answers the get (see Find), else nullptr.
  Region* Check(const Hint& h, uintptr_t start, uintptr_t end, int access, uintptr_t* region_start,
                uintptr_t* region_end) const {
    const uint32_t seq = h.seq.load(std::memory_order_acquire);
    if (seq & 1) return nullptr;
    const uint32_t filled = h.epoch.load(std::memory_order_relaxed);
    const uintptr_t s = h.start.load(std::memory_order_relaxed);
    const uintptr_t e = s + h.length.load(std::memory_order_relaxed);
    const int have = h.access.load(std::memory_order_relaxed);
    Region* r = h.region.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.seq.load(std::memory_order_relaxed) != seq) return nullptr;
    if (filled != epoch_ || s > start || end > e || !AccessCompatible(have, access)) {
      return nullptr;
    }
    if (region_start != nullptr) *region_start = s;
    if (region_end != nullptr) *region_end = e;
    return r;
  }
  // Find's search of an existing table: the get's two lines.
  __attribute__((noinline)) Region* FindInTable(uintptr_t start, uintptr_t end, int access,
                                                uintptr_t* region_start,
                                                uintptr_t* region_end) const {
    const uintptr_t page = start >> 12;
    for (Line* line : {&lines_[First(page)], &lines_[Second(page)]}) {
      for (const Hint& h : line->hints) {
        if (Region* r = Check(h, start, end, access, region_start, region_end)) return r;
      }
    }
    return nullptr;
  }

  // A new epoch; at the wrap, every hint emptied.
  void VoidAll();

  Line* lines_ = nullptr;
  size_t lines_count_ = 0;
  int shift_ = 64;      // 64 - log2(lines)
  uint32_t epoch_ = 1;  // written under the cache's write lock
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_COVERING_HINTS_H_
