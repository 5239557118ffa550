// pool.h: a pool of pre-registered buffers (C API: mrc_pool_* in mrcache.h).
//
// Hot paths (eager sends, bounce buffers, RPC messages) want memory that is
// already registered. Pool::Alloc returns a buffer and the keys that cover it
// without calling the registrar: the pool's memory is registered a chunk at a
// time, when jemalloc asks for more.
//
// How: a dedicated jemalloc arena (arenas.create) in the pool's private copy of
// jemalloc (private_jemalloc.h; the application's malloc stays its own) whose
// extent hooks carve jemalloc's extents out of the pool's chunks. A chunk is
// config.pool_chunk_bytes (or the extent's size, page-rounded, when that is
// more than half a chunk),
// aligned to the chunk size, with hugepages when config.pool_hugepages is set
// and the kernel has them (else normal pages and one line on stderr), and is
// registered with the Registrar once, when mapped. The free parts of the
// chunks are FreeRanges (best fit), so a freed buffer of any size is reused.
//
// Registered memory follows the live bytes: jemalloc keeps no free extents
// (opt.retain off, decay times 0: an extent freed is handed back to the
// dalloc hook at once), so a chunk whose buffers are all free is known at the
// moment its last extent comes back. Such empty chunks are kept, up to
// config.pool_retain_bytes in total, for reuse; any other, and any chunk
// longer than pool_chunk_bytes (made for one buffer), is deregistered and
// unmapped there and then.
//
// What stays registered beyond the live buffers: the empty chunks kept
// (<= pool_retain_bytes); buffers cached per thread (jemalloc's tcache, up
// to 64 KiB buffers; the magazine, about 128 KiB per size class and one
// larger buffer of at most a chunk), and the free space of slabs and chunks
// that also hold a live buffer.
//
// Invariants (what jemalloc 5.3 requires of a custom arena):
//  - The arena is never arena 0 and nothing else allocates from it.
//  - Pinned pages are never purged or decommitted: the purge and decommit
//    hooks refuse ("not done"). An extent comes back only through dalloc, and
//    its pages stay mapped and registered until their whole chunk is
//    released.
//  - Extents from different chunks never merge (the merge hook refuses unless
//    both halves lie in one chunk), so every extent, and every buffer, lies
//    inside one registration. Splits stay inside a chunk.
//  - Thread caches never mix arenas: each thread uses its own explicit tcache
//    and magazine per pool (thread_tcache.h), or none
//    (PoolOptions::thread_caches = false). A thread keeps at most about
//    128 KiB per size class (up to 64 KiB buffers), and one buffer of up to
//    a chunk, in its magazine.
//  - Buffers are at least 64 bytes and 64-byte aligned: sizes are rounded up to
//    a multiple of 64, whose jemalloc size class is a multiple of 64.
//  - Registered bytes never exceed config.pool_max_bytes: a chunk that would
//    cross it is not mapped and Alloc fails with ENOMEM (after giving the
//    calling thread's cached buffers back and retrying once).
//  - Every chunk registered is deregistered exactly once: when it is released
//    empty, or by the destructor.
//
// Thread safety: Alloc, Keys, Free, Trim and stats may run concurrently from
// any threads. Destruction must not race with any other call. A buffer may be
// freed by a thread other than the one that allocated it.
#ifndef MRCACHE_ALLOCATOR_POOL_H_
#define MRCACHE_ALLOCATOR_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/chunk_map.h"
#include "allocator/free_ranges.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

struct PoolOptions {
  // Access flags of every chunk registration (kAccess* bits), as
  // config.pool_access. A remote right reaches the whole chunk of a buffer:
  // every buffer that shares its registration.
  int access = kAccessLocalWrite;
  // Per-thread private tcaches and magazines (fast). false:
  // MALLOCX_TCACHE_NONE on every call, every allocation takes an arena lock
  // (for comparison).
  bool thread_caches = true;
};

struct PoolStats {
  uint64_t chunks = 0;            // chunks currently mapped and registered
  uint64_t registered_bytes = 0;  // their total length (<= pool_max_bytes)
  uint64_t registrations = 0;     // registrar calls that succeeded
  uint64_t deregistrations = 0;
  uint64_t hugepage_chunks = 0;  // chunks backed by MAP_HUGETLB pages
  uint64_t retained_bytes = 0;   // chunks whose buffers are all free (<= pool_retain_bytes)
  uint64_t released_chunks = 0;  // chunks deregistered and unmapped because they were empty
};

class Pool {
 public:
  // Uses config.pool_chunk_bytes, pool_max_bytes, pool_retain_bytes,
  // pool_hugepages and (first form) pool_access. EINVAL for bad options
  // (access bits, pool_max_bytes < pool_chunk_bytes); the jemalloc or
  // registrar error otherwise. `registrar` must outlive the pool.
  static absl::StatusOr<std::unique_ptr<Pool>> Create(Registrar& registrar, const Config& config);
  static absl::StatusOr<std::unique_ptr<Pool>> Create(Registrar& registrar, const Config& config,
                                                      const PoolOptions& options);

  // Deregisters and unmaps every chunk. Buffers still allocated are reported
  // on stderr with their count; their memory is gone afterwards.
  ~Pool();

  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A buffer of at least `size` bytes, 64-byte aligned, inside one registered
  // chunk. If `keys` is not null it receives addr = the buffer, length = size
  // and the chunk registration's lkey, rkey, access and handle. EINVAL for
  // size 0; ENOMEM when pool_max_bytes is reached (or the registrar's error
  // when it refuses a new chunk).
  absl::StatusOr<void*> Alloc(size_t size, RegionInfo* keys = nullptr);

  // The keys for any address inside the pool's registered chunks: addr = ptr,
  // length = the bytes from ptr to the end of its chunk registration (what
  // the rkey reaches from ptr on; it also reaches the chunk before ptr).
  // EINVAL if ptr is not inside this pool.
  absl::Status Keys(const void* ptr, RegionInfo* keys) const;

  // The registration of the chunk that holds ptr (for device-side access,
  // e.g. Registrar::DeviceWrite at offset ptr - addr). EINVAL as for Keys.
  absl::StatusOr<Registration> ChunkRegistration(const void* ptr) const;

  // Returns a buffer from Alloc to the pool. Null is a no-op. EINVAL, and
  // nothing else happens, for a pointer that is not inside this pool or not
  // 64-byte aligned. Freeing a buffer twice, or an address inside a buffer,
  // is undefined (as for free(3)).
  absl::Status Free(void* ptr);

  // Gives the calling thread's cached buffers back, then every free extent
  // jemalloc still holds (one a concurrent free left behind); chunks that
  // become empty are kept or released as pool_retain_bytes says.
  void Trim();

  PoolStats stats() const;
  // Buffers allocated and not freed. The calling thread's cached buffers are
  // given back first; buffers cached by other live threads count as allocated.
  uint64_t allocated_buffers() const;

  unsigned arena_index() const { return arena_; }
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Hooks;
  Pool(Registrar& registrar, const Config& config, const PoolOptions& options);

  absl::Status Init();
  int CallFlags() const;
  void BuildSizeClasses();
  const PoolChunk* FindChunk(const void* ptr) const;
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<void*> AllocRetry(size_t size, RegionInfo* keys);
  ABSL_ATTRIBUTE_NOINLINE absl::Status ForeignFree(const void* ptr) const;
  // The extent hooks: a page-aligned range for jemalloc, and its return.
  void* AllocExtent(size_t size, size_t alignment);
  bool FreeExtent(void* addr, size_t size);
  // Under mu_: a new registered chunk for an extent of `size`, its whole
  // range free; null (and the hook error set) if it cannot be had.
  PoolChunk* MapChunkLocked(size_t size, size_t alignment);
  // Under mu_: marks the pages of [offset, offset + length) of the chunk
  // as holding buffers of no known class.
  static void ForgetBins(PoolChunk* chunk, size_t offset, size_t length);
  // Under mu_: deregisters and unmaps an empty chunk.
  void ReleaseChunkLocked(PoolChunk* chunk);
  bool SameChunk(const void* a, const void* b) const;
  // The magazine bin of a buffer being freed (kNoBin: none), from its page's
  // entry in the chunk, or from jemalloc the first time.
  uint8_t BinOfFreed(const PoolChunk& chunk, void* ptr) const;
  void* MapAligned(size_t length, size_t alignment, bool hugepages, size_t* map_length);
  void ReleaseAll();

  Registrar& registrar_;
  const size_t chunk_bytes_;
  const size_t max_bytes_;
  const size_t retain_bytes_;
  const PoolOptions options_;
  const uint64_t id_;
  bool hugepages_;  // still trying MAP_HUGETLB
  std::unique_ptr<Hooks> hooks_;
  unsigned arena_ = 0;
  bool arena_created_ = false;
  int arena_flags_ = 0;  // MALLOCX_ARENA(arena_)
  ChunkMap map_;
  // Magazine bins: by (size class >> 6) for classes up to kMagazineMaxBytes,
  // the bin (kNoBin: not cached), and each bin's depth.
  static constexpr size_t kMagazineMaxBytes = 65536;
  static constexpr uint8_t kNoBin = 0xff;
  static constexpr uint8_t kBinUnknown = 0xfe;  // PoolChunk::page_bins: not learnt yet
  uint8_t bin_of_[kMagazineMaxBytes / 64 + 1];
  uint8_t bin_depth_[64];

  mutable std::mutex mu_;  // guards the fields below and every PoolChunk's free_bytes
  // Every chunk object ever made; never freed before the pool (ChunkMap's
  // readers may race with a release). A released chunk's object is unmapped_.
  std::vector<std::unique_ptr<PoolChunk>> chunks_;
  std::vector<PoolChunk*> unmapped_;  // objects of released chunks, for reuse
  FreeRanges free_;
  std::vector<std::pair<void*, size_t>> metadata_maps_;  // jemalloc's own, unregistered
  PoolStats stats_;
};

}  // namespace mrcache

#endif  // MRCACHE_ALLOCATOR_POOL_H_
