// thread_cache.h: per-thread state that makes a cache hit touch no shared
// cache line, and usually one line of the thread's own memory.
//
// For each (thread, cache) pair there is one ThreadCache, owned jointly by the
// thread (through a thread_local directory) and by the cache (its list of
// thread caches); whichever lets go last frees it (`owners`).
//
// A ThreadCache holds one table of 64-byte `Line`s (mask + 1 of them, 64-byte
// aligned), grouped in sets of kWays consecutive lines. A key (an address)
// has a home line, PageHash(key) & mask, and may sit in any line of the home
// line's set; lookups probe the home line first, then the rest of the set
// (ProbeIndex), so a key that did not collide costs one line, as in a
// direct-mapped table, and up to kWays keys whose home lines coincide all fit.
// Each line carries two unrelated halves, both keyed by page: a get of a
// region's first page usually finds its lookup entry and its reference slot
// on one cache line (EntryLine puts the entry on the slot's line when
// that line is in the entry's set):
//  - a lookup entry, in the set of the get's start address (FindEntry): a
//    recent get() answer, read
//    and written only by the owner thread. It is valid only while the slot
//    it names is live and names its region (every event that could make an
//    answer wrong -- invalidation, eviction, merge, flush -- marks the
//    region's slots first) and its `gen` equals the sum of the cache's
//    generation and the release generation of the region's bucket at
//    `release_level` (every memory event that overlaps the region bumps it;
//    see cache_impl.h), and it is used only for the same `access`. It stores the region's
//    own range and the index of the region's slot (`slot`), which stays right
//    as long as the table does (a new table starts with no entries). At most
//    one entry of a set covers a given (range, access): filling one clears
//    the others, so a stale entry never hides a valid one from the probe.
//  - a reference slot, in the set of the region's start (FindSlot): this
//    thread's share of one region's reference count, plus its recency stamp.
//      `ref_region`  the region the slot counts for; written only by the
//                    owner under the cache lock (read lock-free by the owner
//                    alone, and by reclaimers under the lock).
//      `ref_count`   written only by the owner (relaxed loads and stores: no
//                    atomic read-modify-write on the hit path); read by
//                    reclaimers under the lock. Never negative.
//      `ref_last_use` the cache tick of the owner's last fast-path hit on
//                    ref_region (the CLOCK hint; slow-path touches stamp the
//                    Region itself). Owner writes, reclaimers read.
//      `ref_state`   kLive; kRetired once ref_region left the index (set by
//                    the reclaimer under the lock, before its fence and
//                    sum; lock-free hits check it after their own fence); kDead once ref_region was
//                    killed (set under the lock before the Region is freed), after which the slot's
//                    fields are meaningless and the owner may reclaim it on its next slow path.
//    Invariant: a slot whose state is not kDead names a live Region, and
//    sits in the set of that region's start in its thread's current table;
//    a thread has at most one such slot per region (a slot is claimed only
//    after FindSlot found none). So a pointer compare (ref_region == r) on a
//    non-dead slot identifies r exactly, even if r's address once belonged
//    to a freed region: every slot naming that one was marked kDead first.
//    A claim takes, in probe order, an empty or kDead slot, else the slot
//    with a zero count whose last fast-path hit is oldest; with all kWays
//    slots counting references the reference goes to the region's shared
//    count and the get takes no lookup entry.
//  - per-thread hit counters, summed by stats(), and `last_region`/`last_slot`:
//    the region of the owner's last fast-path hit and its slot, so that a put
//    right after a get finds the slot without reading the Region. Owner only;
//    reset whenever the table is replaced.
//
// Once `orphaned` is set (the thread exited, or dropped the entry from its
// directory) the owner never touches the ThreadCache again; the cache folds
// its counters into the regions' locked counts and frees it.
#ifndef MRCACHE_THREAD_CACHE_H_
#define MRCACHE_THREAD_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mrcache {

class Region;
class CacheImpl;

struct alignas(64) ThreadCache {
  // Size (lines; 64 bytes each). The owner resizes its table on its own
  // slow path (CountSlowGet, EndWindow, MoveSlotsInto), judging the window of gets since
  // the last judgement once it holds at least as many gets as the table has
  // lines. A get that had to take a slot from another live region of ours
  // (or found its set all counting references) is *displacing*: the working
  // set does not fit. (Misses of new memory are not: a larger table would
  // not have answered them.)
  //  - more than 1/kGrowShare of the window's gets displaced: the table
  //    doubles (grows eightfold if more than half did, so that a thread
  //    meeting a large working set gets there in a few windows), up to two
  //    lines per region the cache holds and never beyond kMaxLines;
  //  - at most 1/kShrinkShare displaced, and the regions the window used
  //    (slots hit or holding references, plus slots claimed) fill at most
  //    1/8 of the table: it shrinks to four lines per such region (at least
  //    kMinLines).
  // Bound: kMaxLines lines = 4 MiB per thread and cache. A thread that uses
  // a few regions keeps kMinLines lines (4 KiB) however many the cache
  // holds; a thread that stops calling the cache keeps its table until its
  // next slow path or its exit.
  static constexpr size_t kWays = 4;          // lines per set, a power of two
  static constexpr size_t kMinLines = 64;     // power of two (4 KiB), >= kWays
  static constexpr size_t kMaxLines = 65536;  // power of two (4 MiB)
  static constexpr uint64_t kGrowShare = 64;

  // Owner only: ends the window (kMaxLines states when), starting the next
  // at cache tick `tick`, and returns the lines the table should have from
  // now on (its size if unchanged), at most `cap` when it grows (the cache's
  // two lines per region) and never below its size then. Sets `streaming`.
  size_t EndWindow(uint64_t tick, size_t cap);
  // Owner only: counts a slow-path get in the window; true when the window
  // holds a table's worth of gets and EndWindow is due.
  bool CountSlowGet() {
    ++window_slow;
    const uint64_t gets = hits.load(std::memory_order_relaxed) - window_hits + window_slow;
    return gets >= mask + 1;
  }
  // Owner only: a locked hit (a slow-path get that a cached region answered):
  // the window saw a hit, and the thread is not streaming.
  void CountLockedHit() {
    ++window_locked_hits;
    streaming = false;
  }
  // Owner only, under the cache lock (it writes Region::locked_refs):
  // replaces this table by `fresh`'s (allocated outside the lock, empty),
  // which `fresh` then holds, to be freed outside the lock. Lookup entries
  // start empty. Slots counting references move to their region's set in
  // the new table, state and all; one that finds its set full goes to its
  // region's locked count and stamp, as does the stamp of a slot with no
  // count. (A slot that is not kDead names a live region, so reading it is
  // safe; no two name the same region, so none is found in the new table
  // before it moves.)
  void MoveSlotsInto(ThreadCache* fresh);
  static constexpr uint64_t kShrinkShare = 256;

  enum RefState : uint8_t { kLive = 0, kRetired = 1, kDead = 2 };

  struct alignas(64) Line {
    // Lookup entry (owner thread only).
    uint64_t gen = 0;     // 0: empty (the cache generation starts at 1)
    uintptr_t start = 0;  // the region's range, not the request's
    uintptr_t end = 0;
    Region* region = nullptr;
    int access = 0;             // what the get asked for
    uint16_t slot = 0;          // the line of the region's slot (FindSlot) when filled
    uint8_t release_level = 0;  // the level of the release generation in `gen`
    // Reference slot (see the header comment).
    std::atomic<uint8_t> ref_state{kLive};
    Region* ref_region = nullptr;
    std::atomic<int64_t> ref_count{0};
    std::atomic<uint64_t> ref_last_use{0};
  };
  static_assert(sizeof(Line) == 64, "a lookup entry and a reference slot share one cache line");
  static_assert(kMaxLines - 1 <= UINT16_MAX, "Line::slot holds a line index");
  static_assert(kMinLines >= kWays && (kWays & (kWays - 1)) == 0, "whole sets of kWays lines");

  // Page hash, independent of the table size; callers mask with `mask`.
  // An xor of shifted page numbers: consecutive pages take consecutive
  // lines, and the shifts by 3 and 7 spread equal-sized buffers (strides of
  // 8 to 4,096 pages, what slab allocators hand out) over distinct lines as
  // well; without them, regions 16 pages apart shared 1 line in 16. (A
  // multiplicative hash spreads strides too, but collides at random: at
  // 10,000 regions in 8,192 lines it kept half the hits this one does.)
  static size_t PageHash(uintptr_t addr) {
    const uintptr_t page = addr >> 12;
    return page ^ (page >> 3) ^ (page >> 7) ^ (page >> 13) ^ (page >> 26);
  }
  // The i-th line (0 <= i < kWays) to probe for a key whose home line is
  // `home`: the home line itself, then the other lines of its set.
  static size_t ProbeIndex(size_t home, size_t i) { return home ^ i; }
  size_t HomeIndex(uintptr_t addr) const { return PageHash(addr) & mask; }

  // The line whose lookup entry covers [start, end) for `access`, first in
  // probe order, or nullptr. Its generation is the caller's to check.
  Line* FindEntry(uintptr_t start, uintptr_t end, int access) {
    const size_t home = HomeIndex(start);
    for (size_t i = 0; i < kWays; ++i) {
      Line& e = lines[ProbeIndex(home, i)];
      if (e.start <= start && end <= e.end && e.access == access) return &e;
    }
    return nullptr;
  }
  // The non-dead slot naming `region`, which starts at region_start, or
  // nullptr. Owner thread, or the cache lock held.
  Line* FindSlot(const Region* region, uintptr_t region_start) {
    const size_t home = HomeIndex(region_start);
    for (size_t i = 0; i < kWays; ++i) {
      Line& slot = lines[ProbeIndex(home, i)];
      if (slot.ref_region == region && slot.ref_state.load(std::memory_order_relaxed) != kDead) {
        return &slot;
      }
    }
    return nullptr;
  }
  const Line* FindSlot(const Region* region, uintptr_t region_start) const {
    return const_cast<ThreadCache*>(this)->FindSlot(region, region_start);
  }
  // The slot a region starting at region_start may claim (the header
  // comment's order), or nullptr if all of its set count references. The
  // caller has checked that no slot names the region.
  Line* ClaimableSlot(uintptr_t region_start) {
    const size_t home = HomeIndex(region_start);
    Line* oldest = nullptr;
    for (size_t i = 0; i < kWays; ++i) {
      Line& slot = lines[ProbeIndex(home, i)];
      if (slot.ref_region == nullptr || slot.ref_state.load(std::memory_order_relaxed) == kDead) {
        return &slot;
      }
      if (slot.ref_count.load(std::memory_order_relaxed) == 0 &&
          (oldest == nullptr || slot.ref_last_use.load(std::memory_order_relaxed) <
                                    oldest->ref_last_use.load(std::memory_order_relaxed))) {
        oldest = &slot;
      }
    }
    return oldest;
  }

  // Owner only, the cache lock held in either mode (it writes only this
  // table, its window counters and `displaced`): counts a reference to r (in
  // the index, starting at r_start) in this thread's slot naming r, or in
  // one it claims (ClaimSlot), and returns the slot; nullptr, with nothing
  // changed, if every slot of r's set counts references to other regions.
  // Reads no field of r.
  Line* TakeSlotRef(Region* r, uintptr_t r_start, uint64_t region_frees) {
    // r is in the index, so a non-dead slot naming it is live (not retired).
    if (Line* own = FindSlot(r, r_start)) {
      OwnerAdd(own->ref_count, 1);
      return own;
    }
    return ClaimSlot(r, r_start, region_frees);
  }
  // Its second half (the caller: no slot names r): claims a slot of r's set
  // for r with a count of 1, or returns nullptr if every slot counts
  // references. The stamp of a live region that loses its slot is deferred
  // (DeferLastUse, with `region_frees`).
  Line* ClaimSlot(Region* r, uintptr_t r_start, uint64_t region_frees);

  // Owner only: voids the lookup entries of the set of `start` that cover
  // [start, end) for `access`, so that a new entry is the only one that
  // does (a stale one could hide it from the probe).
  void ClearEntriesCovering(uintptr_t start, uintptr_t end, int access) {
    const size_t home = HomeIndex(start);
    for (size_t i = 0; i < kWays; ++i) {
      Line& line = lines[ProbeIndex(home, i)];
      if (line.start <= start && end <= line.end && line.access == access) {
        line.gen = 0;
        line.start = line.end = 0;
      }
    }
  }
  // Owner only: the line for a new lookup entry of a get starting at
  // `start` whose reference is counted in `slot`: the slot's own line if it
  // is in the entry's set (one line per hit), else the first line of the set
  // that is empty or that `stale(line)` says is void, else one in turn.
  template <typename Stale>
  Line* EntryLine(uintptr_t start, Line* slot, Stale stale) {
    const size_t home = HomeIndex(start);
    const size_t slot_index = static_cast<size_t>(slot - lines);
    if ((slot_index & ~(kWays - 1)) == (home & ~(kWays - 1))) return slot;
    for (size_t i = 0; i < kWays; ++i) {
      Line& line = lines[ProbeIndex(home, i)];
      if (line.gen == 0 || stale(line)) return &line;
    }
    return &lines[ProbeIndex(home, window_claims % kWays)];
  }

  // Tables are whole pages of their own (mmap), never heap chunks: a freed
  // table goes back to the system at once, so thread churn does not leave
  // the allocator's per-thread arenas holding freed tables.
  explicit ThreadCache(size_t slots = kMinLines) : mask(slots - 1), lines(AllocateLines(slots)) {}
  ~ThreadCache() { FreeLines(lines, mask + 1); }
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  // Relaxed "increment" by the owner: a load and a store, no lock prefix.
  static void OwnerAdd(std::atomic<int64_t>& c, int64_t d) {
    c.store(c.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  static void OwnerAdd(std::atomic<uint64_t>& c, uint64_t d) {
    c.store(c.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  // Owner thread's hot fields (the hit path reads the first three).
  uint64_t cache_uid = 0;
  // The table has mask + 1 lines. `lines` and `mask` change only by the
  // owner thread under the cache lock (MoveSlotsInto).
  size_t mask;
  Line* lines;
  std::atomic<uint64_t> hits{0};
  // Gets of this thread answered with the cache lock held for reading
  // (CacheImpl::HitShared): counted here, by the owner, so that threads
  // doing them write no shared counter; summed like `hits`.
  std::atomic<uint64_t> read_locked_hits{0};
  // The cache lock's reader slot this thread counts itself in when it reads
  // (SharedMutex::lock_shared): threads take turns, so that two threads
  // reading at once seldom write the same line. Set by the cache at attach.
  int reader_slot = 0;
  // The window the size is judged by (owner only; see kMaxLines): the
  // `hits` it started at, its slow-path gets, the gets that claimed a slot
  // (or found their set all counting references) and those that displaced,
  // both counted under the cache lock, and the cache tick it started at
  // (slots hit since are stamped with a later or equal tick).
  uint64_t window_hits = 0;
  uint64_t window_slow = 0;
  uint64_t window_claims = 0;
  uint64_t window_displaced = 0;
  uint64_t window_tick = 0;
  // Owner only. The window's slow-path gets that a cached region answered
  // (locked hits). `streaming`: the last window's gets all missed, and no
  // get has hit since. While it is set, a region this thread installs gets
  // its reference slot but no lookup entry: a thread streaming through new
  // memory does not fill entries it never uses, and its first get of such
  // a region again is a locked hit (which fills one, and clears the flag).
  uint64_t window_locked_hits = 0;
  bool streaming = false;
  Region* last_region = nullptr;  // owner only: last fast-path hit ...
  Line* last_slot = nullptr;      // ... and its slot in `lines`
  // Owner only: whether this thread's last slow-path get found a covering
  // region. While it did, the next one first tries the index with the cache
  // lock held for reading (CacheImpl::HitShared); after a miss it goes
  // straight to the write lock, so a run of misses looks the index up once.
  bool slow_hit_expected = true;
  // Owner only (or the cache once orphaned), under the cache lock in either
  // mode: recency stamps of regions whose slot a claim took over, not yet
  // folded into those regions (DeferLastUse). Folding one at once
  // reads a Region nothing else on the claiming get reads, a cache miss at
  // large working sets; deferred, the Region is prefetched and folded a few
  // claims later, or when this thread evicts or the cache folds an orphan.
  // The stamps are valid only while `displaced_frees` equals the cache's
  // count of freed Region batches (no Region they name can have been freed);
  // when it does not they are dropped, and those regions look older than
  // they are to eviction (as they do to another thread's eviction while the
  // stamps wait here).
  static constexpr size_t kDisplacedBatch = 8;
  struct DisplacedStamp {
    Region* region;
    uint64_t last_use;
  };
  DisplacedStamp displaced[kDisplacedBatch];
  size_t displaced_count = 0;
  uint64_t displaced_frees = 0;
  // Owner only, the cache lock held in either mode: keeps `used`, the stamp
  // of a slot that r (not dead) is losing, in `displaced` and prefetches r;
  // folds the waiting stamps first when kDisplacedBatch of them wait or they
  // are void. `region_frees`: the cache's count of freed Region batches.
  void DeferLastUse(Region* r, uint64_t used, uint64_t region_frees);
  // Raises the last_use of the regions `displaced` names to their stamps
  // and empties it, the one place that decides whether they are still
  // valid: it drops them instead if `region_frees` moved since they were
  // taken, as they may name freed memory. The owner thread, or any thread
  // once orphaned; the cache lock held in either mode.
  void FoldDisplaced(uint64_t region_frees);
  // True if FoldDisplaced has something to do.
  bool HasDisplaced(uint64_t region_frees) const {
    return displaced_count != 0 || displaced_frees != region_frees;
  }

  CacheImpl* cache = nullptr;
  std::atomic<int> owners{2};         // the thread's directory + the cache's list
  std::atomic<bool> orphaned{false};  // the owner thread let go
  ThreadCache* next = nullptr;        // cache's list, under the cache lock

  // A zeroed table of n lines (n * 64 bytes, a multiple of the page size
  // for n >= kMinLines). Aborts if memory is exhausted, as new[] would.
  static Line* AllocateLines(size_t n);
  static void FreeLines(Line* lines, size_t n);

  // Drops one owner; frees the ThreadCache on the last.
  static void Unref(ThreadCache* tc) {
    if (tc->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete tc;
  }
};

namespace thread_cache_internal {
// The calling thread's directory, most recently used first (thread_cache.cc).
constexpr int kDirectoryEntries = 8;
extern __thread ThreadCache* tl_directory[kDirectoryEntries]
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
ThreadCache* FindThreadCacheAfterFirst(uint64_t cache_uid);
// Raised (after the `orphaned` store) every time a ThreadCache is orphaned,
// in any thread and for any cache.
extern std::atomic<uint64_t> g_orphan_epoch;
}  // namespace thread_cache_internal

// Changes after a ThreadCache of any cache was orphaned: a cache that saw
// the same value at its last fold has no orphan to fold.
inline uint64_t OrphanEpoch() {
  return thread_cache_internal::g_orphan_epoch.load(std::memory_order_acquire);
}

// The calling thread's ThreadCache for the cache with this uid, or nullptr.
// Hit path: one compare, inline, in the common case.
inline ThreadCache* FindThreadCache(uint64_t cache_uid) {
  ThreadCache* first = thread_cache_internal::tl_directory[0];
  if (__builtin_expect(first != nullptr && first->cache_uid == cache_uid, 1)) return first;
  return thread_cache_internal::FindThreadCacheAfterFirst(cache_uid);
}
// Installs tc in the calling thread's directory (evicting, and orphaning, the
// least recently used entry if the directory is full). At thread exit every
// entry is orphaned (a pthread key destructor).
void InstallThreadCache(ThreadCache* tc);

}  // namespace mrcache

#endif  // MRCACHE_THREAD_CACHE_H_
