#include "mrcache/core/thread_cache.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <utility>

#include "mrcache/core/dcheck.h"
#include "mrcache/core/region.h"
#include "mrcache/core/table_memory.h"

namespace mrcache {
namespace {

using thread_cache_internal::kDirectoryEntries;
using thread_cache_internal::tl_directory;

// A pthread key's destructor orphans the directory's entries at thread exit.
__thread bool tl_exit_hook_armed __attribute__((tls_model("initial-exec"), visibility("hidden")));

// Gives up this thread's use of tc: orphaned, the orphan epoch raised after
// (thread_cache_internal::g_orphan_epoch), and the thread's reference dropped.
void Orphan(ThreadCache* tc) {
  tc->orphaned.store(true, std::memory_order_release);
  thread_cache_internal::g_orphan_epoch.fetch_add(1, std::memory_order_release);
  ThreadCache::Unref(tc);
}

void OrphanAll(void*) {
  for (ThreadCache*& tc : tl_directory) {
    if (tc == nullptr) continue;
    Orphan(tc);
    tc = nullptr;
  }
}

pthread_key_t ExitKey() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    pthread_key_create(&k, &OrphanAll);
    return k;
  }();
  return key;
}

}  // namespace

namespace thread_cache_internal {

// Plain data in initial-exec TLS, so the hit path reaches it without a call
// (even from libmrcache.so).
__thread ThreadCache* tl_directory[kDirectoryEntries]
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

std::atomic<uint64_t> g_orphan_epoch{0};

ThreadCache* FindThreadCacheAfterFirst(uint64_t cache_uid) {
  for (int i = 1; i < kDirectoryEntries; ++i) {
    ThreadCache* tc = tl_directory[i];
    if (tc != nullptr && tc->cache_uid == cache_uid) {
      for (int j = i; j > 0; --j) tl_directory[j] = tl_directory[j - 1];
      tl_directory[0] = tc;
      return tc;
    }
  }
  return nullptr;
}

}  // namespace thread_cache_internal

ThreadCache::Line* ThreadCache::AllocateLines(size_t n) {
  void* p = MapTableMemory(n * sizeof(Line));
  if (p == MAP_FAILED) std::abort();
  Line* lines = static_cast<Line*>(p);
  for (size_t i = 0; i < n; ++i) new (&lines[i]) Line();
  return lines;
}

void ThreadCache::FreeLines(Line* lines, size_t n) {
  if (lines == nullptr) return;
  UnmapTableMemory(lines, n * sizeof(Line));
}

void InstallThreadCache(ThreadCache* tc) {
  if (!tl_exit_hook_armed) {
    // Any non-null value makes the destructor run at thread exit.
    pthread_setspecific(ExitKey(), reinterpret_cast<void*>(1));
    tl_exit_hook_armed = true;
  }
  ThreadCache* evicted = tl_directory[kDirectoryEntries - 1];
  for (int j = kDirectoryEntries - 1; j > 0; --j) tl_directory[j] = tl_directory[j - 1];
  tl_directory[0] = tc;
  if (evicted != nullptr) Orphan(evicted);
}

size_t ThreadCache::EndWindow(uint64_t tick, size_t cap) {
  // The policy is stated at kMaxLines.
  const size_t size = mask + 1;
  const uint64_t hits_now = hits.load(std::memory_order_relaxed);
  const uint64_t gets = hits_now - window_hits + window_slow;
  const uint64_t claims = window_claims;
  const uint64_t displaced = window_displaced;
  const uint64_t since = window_tick;
  streaming = hits_now == window_hits && window_locked_hits == 0;
  window_hits = hits_now;
  window_slow = 0;
  window_claims = 0;
  window_displaced = 0;
  window_locked_hits = 0;
  window_tick = tick;
  size_t want = size;
  if (displaced * kGrowShare > gets) {
    want = displaced * 2 > gets ? size * 8 : size * 2;
    if (want > cap) want = cap > size ? cap : size;
  } else if (displaced * kShrinkShare <= gets && size > kMinLines) {
    // The regions the window used: those of the slots hit in it or still
    // counting a reference, and those it claimed slots for (an upper bound).
    uint64_t used = claims;
    for (size_t i = 0; i < size; ++i) {
      const Line& slot = lines[i];
      if (slot.ref_region == nullptr || slot.ref_state.load(std::memory_order_relaxed) == kDead) {
        continue;
      }
      if (slot.ref_count.load(std::memory_order_relaxed) != 0 ||
          slot.ref_last_use.load(std::memory_order_relaxed) >= since) {
        ++used;
      }
    }
    if (used * 8 <= size) {
      want = kMinLines;
      while (want < used * 4) want *= 2;
    }
  }
  return want;
}

ThreadCache::Line* ThreadCache::ClaimSlot(Region* r, uintptr_t r_start, uint64_t region_frees) {
  ++window_claims;
  Line* slot = ClaimableSlot(r_start);
  if (slot == nullptr) return nullptr;
  // A slot is reused only once it counts no reference (its region's
  // readers left), or once its region is dead.
  MRCACHE_DCHECK(slot->ref_region == nullptr ||
                 slot->ref_state.load(std::memory_order_relaxed) == kDead ||
                 slot->ref_count.load(std::memory_order_relaxed) == 0);
  // Claim the slot: its previous region holds no reference from us, and
  // keeps the recency the slot recorded for it (it is alive unless dead).
  const bool dead = slot->ref_state.load(std::memory_order_relaxed) == kDead;
  if (!dead && slot->ref_region != nullptr) {
    DeferLastUse(slot->ref_region, slot->ref_last_use.load(std::memory_order_relaxed),
                 region_frees);
    ++window_displaced;  // a live region of ours loses its slot: the set is full
  }
  slot->ref_region = r;
  slot->ref_last_use.store(0, std::memory_order_relaxed);
  slot->ref_state.store(kLive, std::memory_order_relaxed);
  slot->ref_count.store(1, std::memory_order_release);
  return slot;
}

void ThreadCache::DeferLastUse(Region* r, uint64_t used, uint64_t region_frees) {
  if (used == 0) return;  // never hit through this slot: nothing to keep
  if (displaced_count == kDisplacedBatch || displaced_frees != region_frees) {
    FoldDisplaced(region_frees);  // full, or the waiting stamps are void
  }
  __builtin_prefetch(&r->last_use, 1);
  displaced[displaced_count++] = {r, used};
}

void ThreadCache::FoldDisplaced(uint64_t region_frees) {
  if (displaced_frees == region_frees) {
    for (size_t i = 0; i < displaced_count; ++i) {
      displaced[i].region->RaiseLastUse(displaced[i].last_use);
    }
  }
  displaced_count = 0;
  displaced_frees = region_frees;
}

void ThreadCache::MoveSlotsInto(ThreadCache* fresh) {
  for (size_t i = 0; i <= mask; ++i) {
    Line& old = lines[i];
    Region* r = old.ref_region;
    const uint8_t state = old.ref_state.load(std::memory_order_relaxed);
    if (r == nullptr || state == kDead) continue;
    const int64_t count = old.ref_count.load(std::memory_order_relaxed);
    const uint64_t used = old.ref_last_use.load(std::memory_order_relaxed);
    Line* slot = count != 0 ? fresh->ClaimableSlot(r->start) : nullptr;
    if (slot != nullptr) {
      slot->ref_region = r;
      slot->ref_state.store(state, std::memory_order_relaxed);
      slot->ref_count.store(count, std::memory_order_relaxed);
      slot->ref_last_use.store(used, std::memory_order_relaxed);
    } else {
      r->locked_refs += count;
      r->RaiseLastUse(used);
    }
  }
  std::swap(mask, fresh->mask);
  std::swap(lines, fresh->lines);
  last_region = nullptr;  // last_slot pointed into the old table
  last_slot = nullptr;
}

}  // namespace mrcache
