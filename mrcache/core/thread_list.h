// thread_list.h: the threads attached to one cache (their ThreadCaches, in
// the cache's list) and what the cache reads across all of them: a region's
// reference count and latest stamp (its slots), whether any other live
// thread is attached, and the hit counters, including those of threads that
// left (folded in when their ThreadCache is orphaned).
//
// Not thread-safe: the cache guards it with its lock (CacheImpl::mu_).
// The const methods need the lock held for reading, the others held for
// writing. The owner threads change their own slots' counts and stamps
// without the lock; the sums read them with acquire loads (the protocol in
// cache_impl.h says when a sum is final).
#ifndef MRCACHE_CORE_THREAD_LIST_H_
#define MRCACHE_CORE_THREAD_LIST_H_

#include <cstdint>

#include "mrcache/core/region.h"
#include "mrcache/core/thread_cache.h"

namespace mrcache {

class ThreadList {
 public:
  // The list of the cache whose uid is `cache_uid` (ThreadCache::cache_uid).
  explicit ThreadList(uint64_t cache_uid) : cache_uid_(cache_uid) {}
  // Drops the cache's reference to every ThreadCache still listed (a thread
  // that still holds one frees it when it lets go).
  ~ThreadList();
  ThreadList(const ThreadList&) = delete;
  ThreadList& operator=(const ThreadList&) = delete;

  // Lists tc, the calling thread's new ThreadCache of this cache.
  void Attach(ThreadCache* tc) {
    tc->next = head_;
    head_ = tc;
  }

  // The sum of r's locked count and its slots' counts; with last_use, also
  // the max of r's own stamp and its live slots' stamps.
  int64_t TotalRefs(const Region* r, uint64_t* last_use = nullptr) const {
    int64_t total = r->locked_refs;
    uint64_t used = r->last_use.load(std::memory_order_relaxed);
    for (const ThreadCache* tc = head_; tc != nullptr; tc = tc->next) {
      if (const ThreadCache::Line* slot = tc->FindSlot(r, r->start)) {
        total += slot->ref_count.load(std::memory_order_acquire);
        const uint64_t hit = slot->ref_last_use.load(std::memory_order_relaxed);
        if (hit > used) used = hit;
      }
    }
    if (last_use != nullptr) *last_use = used;
    return total;
  }

  // Sets the state of every thread's non-dead slot naming r; true if one of
  // them belongs to a live thread other than the caller.
  bool MarkSlots(const Region* r, uint8_t state) {
    bool others = false;
    const ThreadCache* mine = nullptr;  // looked up at the first slot found
    for (ThreadCache* tc = head_; tc != nullptr; tc = tc->next) {
      if (ThreadCache::Line* slot = tc->FindSlot(r, r->start)) {
        slot->ref_state.store(state, std::memory_order_release);
        if (others || tc->orphaned.load(std::memory_order_acquire)) continue;
        if (mine == nullptr) mine = FindThreadCache(cache_uid_);
        others = tc != mine;
      }
    }
    return others;
  }

  // True if no live thread but the caller is attached: then no lock-free
  // hit or put can run while the caller holds the cache lock.
  bool Alone() const {
    const ThreadCache* mine = FindThreadCache(cache_uid_);
    for (const ThreadCache* tc = head_; tc != nullptr; tc = tc->next) {
      if (tc != mine && !tc->orphaned.load(std::memory_order_acquire)) return false;
    }
    return true;
  }

  // True if a ThreadCache may have been orphaned since the last FoldOrphans.
  bool MayHaveOrphans() const { return OrphanEpoch() != folded_orphan_epoch_; }
  // Unlists the orphaned ThreadCaches, moving their slots' counts into their
  // regions' locked counts, their stamps (and deferred stamps, valid while
  // `region_frees` is unchanged: ThreadCache::displaced) into the regions,
  // and their hit counters into this list's.
  void FoldOrphans(uint64_t region_frees);

  // Fast-path hits of every thread, orphaned ones included.
  uint64_t Hits() const;
  // Gets answered with the cache lock held for reading, the same way.
  uint64_t ReadLockedHits() const;

 private:
  const uint64_t cache_uid_;
  ThreadCache* head_ = nullptr;  // linked through ThreadCache::next
  // The counters of the ThreadCaches folded so far.
  uint64_t folded_hits_ = 0;
  uint64_t folded_read_locked_hits_ = 0;
  // OrphanEpoch() when orphans were last folded.
  uint64_t folded_orphan_epoch_ = 0;
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_THREAD_LIST_H_
