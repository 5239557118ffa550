// thread_tcache.h: one private jemalloc thread cache per (thread, pool).
//
// jemalloc's automatic thread cache is shared by every arena a thread touches:
// an object freed into it from one arena can be handed out by mallocx for
// another. The pool therefore never uses it. Each thread gets its own explicit
// tcache (mallctl "tcache.create") for each pool it uses, and passes it as
// MALLOCX_TCACHE(id) on every mallocx/dallocx of that pool: a tcache only ever
// holds objects of one pool's arena.
//
// Lifetime:
//  - A pool registers its id (unique per process, never reused) at creation and
//    unregisters it at destruction; unregistering destroys (flushes) every
//    tcache made for it, whichever thread made it. The caller guarantees that
//    no thread uses the pool at that point.
//  - A thread that exits, or that needs its slot for another pool, destroys its
//    tcache for a pool that is still registered. A global mutex orders these
//    against pool destruction, so no tcache is destroyed twice.
//  - If jemalloc has no tcache left (it supports a few thousand), the thread
//    uses MALLOCX_TCACHE_NONE for that pool: slower, still correct.
//
// In front of the tcache sits a Magazine: per size class, a short stack of
// buffers this thread freed, handed out again without calling jemalloc at all
// (jemalloc's flag-taking mallocx/dallocx cost about twice glibc's malloc/free
// on their own, and fire jemalloc's per-64-KiB thread events). The pool bounds
// each stack's depth (about 128 KiB per class), and keeps at most one larger
// buffer (up to a chunk) besides, which jemalloc's tcache would not cache;
// everything in a magazine is returned through its tcache when the slot is
// released or flushed.
//
// Fast path: ThreadSlot() is a thread-local array probe; the mutex is taken
// only when a thread first uses a pool.
#ifndef MRCACHE_ALLOCATOR_THREAD_TCACHE_H_
#define MRCACHE_ALLOCATOR_THREAD_TCACHE_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {
namespace pool_internal {

// Buffers freed by one thread, by size class, for one pool. Owned by the
// thread's slot; touched by another thread only when the pool is destroyed.
struct Magazine {
  static constexpr int kMaxBins = 48;
  static constexpr int kMaxDepth = 32;
  uint8_t count[kMaxBins];
  void* slots[kMaxBins][kMaxDepth];
  // One larger buffer (above the bins' sizes, at most the pool's chunk size)
  // and its jemalloc usable size, or null.
  void* large;
  size_t large_usize;
};

struct TcacheSlot {
  uint64_t pool_id;    // 0 = empty
  int flags;           // MALLOCX_TCACHE(id) or MALLOCX_TCACHE_NONE
  unsigned tcache;     // the explicit tcache id, or kNoTcache
  Magazine* magazine;  // null if it could not be allocated
};
constexpr int kTcacheSlots = 8;
constexpr unsigned kNoTcache = ~0u;
extern thread_local TcacheSlot t_tcache_slots[kTcacheSlots];

// A new process-unique pool id (> 0).
uint64_t NewPoolId();
void RegisterPool(uint64_t pool_id);
// Destroys every tcache and magazine made for the pool; later ThreadSlot calls for it
// must not happen.
void UnregisterPool(uint64_t pool_id);
// Returns the calling thread's cached objects of the pool (magazine and
// tcache) to its arena.
void FlushCallingThread(uint64_t pool_id);

TcacheSlot& ThreadSlotSlow(uint64_t pool_id);

// The calling thread's tcache and magazine for the pool, made on first use.
inline TcacheSlot& ThreadSlot(uint64_t pool_id) {
  TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  if (slot.pool_id == pool_id) return slot;
  return ThreadSlotSlow(pool_id);
}

}  // namespace pool_internal
}  // namespace mrcache

#endif  // MRCACHE_ALLOCATOR_THREAD_TCACHE_H_
