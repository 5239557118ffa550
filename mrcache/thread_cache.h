// thread_cache.h: per-thread state that makes a cache hit touch no shared
// cache line.
//
// For each (thread, cache) pair there is one ThreadCache, owned jointly by the
// thread (through a thread_local directory) and by the cache (its list of
// thread caches); whichever lets go last frees it (`owners`).
//
// A ThreadCache holds:
//  - `lookup`: a direct-mapped table of recent get() answers, read and written
//    only by the owner thread. An entry is valid only while its `gen` equals
//    the cache's generation; every event that could make an answer wrong
//    (invalidation, eviction, merge, flush) bumps the generation first.
//  - `refs`: per-region reference counters, indexed by a hash of the region
//    id. Written by the owner thread only (relaxed loads and stores: no atomic
//    read-modify-write on the hit path); read by reclaimers under the cache
//    lock. A slot whose `dead` flag is set belongs to a region that is gone:
//    its count is meaningless and the owner reclaims the slot on its next slow
//    path. `region` is written only by the owner under the cache lock.
//  - per-thread hit counters, summed by stats().
//
// Once `orphaned` is set (the thread exited, or dropped the entry from its
// directory) the owner never touches the ThreadCache again; the cache folds
// its counters into the regions' shared counts and frees it.
#ifndef MRCACHE_THREAD_CACHE_H_
#define MRCACHE_THREAD_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mrcache {

class Region;
class CacheImpl;

struct ThreadCache {
  // Both tables start small and grow (owner thread, see CacheImpl) to about
  // four slots per cached region, up to kMaxSlots.
  static constexpr size_t kMinSlots = 256;   // power of two
  static constexpr size_t kMaxSlots = 8192;  // power of two

  struct LookupEntry {
    uint64_t gen = 0;  // 0: empty (the cache generation starts at 1)
    uintptr_t start = 0;
    uintptr_t end = 0;
    int access = 0;
    Region* region = nullptr;
    uint64_t region_id = 0;
  };

  struct RefSlot {
    std::atomic<uint64_t> region_id{0};
    std::atomic<int64_t> count{0};
    std::atomic<bool> dead{false};
    Region* region = nullptr;  // owner writes under the cache lock
  };

  // Hashes independent of the table size; callers mask with `mask`.
  static size_t LookupHash(uintptr_t addr) {
    uintptr_t page = addr >> 12;
    return page ^ (page >> 13) ^ (page >> 26);
  }
  static size_t RefHash(uint64_t region_id) {
    return static_cast<size_t>(region_id * 0x9E3779B97F4A7C15ull >> 32);
  }
  LookupEntry& LookupFor(uintptr_t addr) { return lookup[LookupHash(addr) & mask]; }
  RefSlot& RefFor(uint64_t region_id) { return refs[RefHash(region_id) & mask]; }
  const RefSlot& RefFor(uint64_t region_id) const { return refs[RefHash(region_id) & mask]; }

  explicit ThreadCache(size_t slots = kMinSlots)
      : mask(slots - 1), lookup(new LookupEntry[slots]), refs(new RefSlot[slots]) {}
  ~ThreadCache() {
    delete[] lookup;
    delete[] refs;
  }
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  // Relaxed "increment" by the owner: a load and a store, no lock prefix.
  static void OwnerAdd(std::atomic<int64_t>& c, int64_t d) {
    c.store(c.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  static void OwnerAdd(std::atomic<uint64_t>& c, uint64_t d) {
    c.store(c.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  uint64_t cache_uid = 0;
  CacheImpl* cache = nullptr;
  std::atomic<int> owners{2};          // the thread's directory + the cache's list
  std::atomic<bool> orphaned{false};   // the owner thread let go
  ThreadCache* next = nullptr;         // cache's list, under the cache lock

  std::atomic<uint64_t> hits{0};
  // Both tables have mask + 1 slots. The pointers and mask change only by the
  // owner thread under the cache lock (CacheImpl::GrowThreadCache).
  size_t mask;
  LookupEntry* lookup;
  RefSlot* refs;

  // Drops one owner; frees the ThreadCache on the last.
  static void Unref(ThreadCache* tc) {
    if (tc->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete tc;
  }
};

// The calling thread's ThreadCache for the cache with this uid, or nullptr.
// Hit path: one compare in the common case.
ThreadCache* FindThreadCache(uint64_t cache_uid);
// Installs tc in the calling thread's directory (evicting, and orphaning, the
// least recently used entry if the directory is full). At thread exit every
// entry is orphaned (a pthread key destructor).
void InstallThreadCache(ThreadCache* tc);

}  // namespace mrcache

#endif  // MRCACHE_THREAD_CACHE_H_
