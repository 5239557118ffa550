// chunk_map.h: which registered pool chunk holds an address, in O(1).
//
// Every chunk the pool maps starts at a multiple of the granule (the pool's
// chunk size, a power of two), so the granule index addr >> lg_granule names
// at most one chunk: two chunks never share a granule, because the next one
// starts at a granule boundary. A two-level radix table over the granule index
// (addresses below 2^48, the x86-64 / AArch64 user space) stores a pointer to
// the chunk for every granule it touches. A lookup is two dependent loads and
// a bounds check, and takes no lock.
//
// Invariants:
//  - Find(p) returns the chunk c with c.start <= p < c.start + c.length, or
//    nullptr; it never returns a chunk for an address outside that chunk,
//    even inside the chunk's last granule.
//  - Readers (Find) run concurrently with writers; writers (Insert, Erase)
//    must be serialized by the caller. A chunk must stay alive until it has
//    been erased and no reader can still hold it (the pool never frees a
//    PoolChunk before its own destruction: a released chunk's object is kept
//    and reused, so a reader racing with a release reads valid memory).
//  - Leaves are allocated on first use and freed with the map.
#ifndef MRCACHE_ALLOCATOR_CHUNK_MAP_H_
#define MRCACHE_ALLOCATOR_CHUNK_MAP_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "mrcache/registrar.h"

namespace mrcache {

// One mapped, registered range of the pool.
struct PoolChunk {
  uintptr_t start = 0;     // granule-aligned
  size_t length = 0;       // bytes handed to jemalloc (and registered)
  size_t map_length = 0;   // bytes mapped (>= length; hugepage rounding)
  bool hugepages = false;  // mapped with MAP_HUGETLB
  Registration registration;
  // Bytes of the chunk not handed to jemalloc (the pool's mutex guards it);
  // == length: every buffer of the chunk is free.
  size_t free_bytes = 0;
  // Changes whenever the object is released or reused for another chunk, so
  // that a thread's remembered lookup (pool.cc) can tell it is stale.
  std::atomic<uint64_t> incarnation{0};
  // Per 4 KiB page: the pool's magazine bin of the buffers that start there,
  // learnt at their first free (jemalloc gives every buffer starting on one
  // page the same size class: a slab has one class, a larger buffer its own
  // extent). The pool resets a page's entry when its extent comes back to it.
  // Null for chunks too large to be worth a table.
  std::unique_ptr<std::atomic<uint8_t>[]> page_bins;
  size_t page_bin_count = 0;
};

class ChunkMap {
 public:
  // lg_granule in [12, 40].
  explicit ChunkMap(int lg_granule);
  ~ChunkMap();
  ChunkMap(const ChunkMap&) = delete;
  ChunkMap& operator=(const ChunkMap&) = delete;

  // Publishes `chunk` for every granule it covers. EINVAL if the chunk is not
  // granule-aligned, is empty, or reaches beyond 2^48; ENOMEM if a leaf cannot
  // be allocated (nothing is published then).
  absl::Status Insert(const PoolChunk* chunk);
  // Removes `chunk` from every granule it covers.
  void Erase(const PoolChunk* chunk);

  const PoolChunk* Find(const void* ptr) const {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
    if (addr >> kAddressBits) return nullptr;
    const uintptr_t index = addr >> lg_granule_;
    const Leaf* leaf = top_[index >> leaf_bits_].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    const PoolChunk* chunk = leaf[index & leaf_mask_].load(std::memory_order_acquire);
    if (chunk == nullptr || addr - chunk->start >= chunk->length) return nullptr;
    return chunk;
  }

  static constexpr int kAddressBits = 48;

 private:
  using Leaf = std::atomic<const PoolChunk*>;

  const int lg_granule_;
  const int leaf_bits_;
  const uintptr_t leaf_mask_;
  const size_t top_entries_;
  std::unique_ptr<std::atomic<Leaf*>[]> top_;
};

}  // namespace mrcache

#endif  // MRCACHE_ALLOCATOR_CHUNK_MAP_H_
