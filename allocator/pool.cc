#include "allocator/pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/private_jemalloc.h"
#include "allocator/thread_tcache.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"

namespace mrcache {
namespace {

constexpr size_t kMinBuffer = 64;  // smallest buffer and its alignment
// PoolChunk::page_bins: one entry per 4 KiB (jemalloc's pages are no smaller),
// for chunks of up to 8,192 pages (32 MiB).
constexpr int kBinPageShift = 12;
constexpr size_t kMaxBinPages = 8192;
constexpr size_t kMaxRequest = size_t{1} << 62;

// Set by the alloc hook when it refuses, read by Alloc in the same thread:
// jemalloc itself only reports "NULL".
thread_local int t_hook_errno = 0;
thread_local char t_hook_message[256];
// The pool whose arena is being created by this thread: jemalloc's metadata
// for the arena (its "base") comes through the alloc hook then, and is mapped
// without registering it.
thread_local const Pool* t_creating_pool = nullptr;

// The chunk this thread last found, per pool id (ids are never reused, so an
// entry of a destroyed pool never matches; its chunk is never dereferenced
// then). Saves the radix walk when a thread allocates from one chunk in a row.
// The chunk object outlives every release (Pool::chunks_); its incarnation
// tells whether it still is the chunk that was found.
struct ChunkHint {
  uint64_t pool_id;
  uintptr_t start;
  size_t length;
  const PoolChunk* chunk;
  uint64_t incarnation;
};
thread_local ChunkHint t_chunk_hint;

void SetHookError(int err, const std::string& message) {
  t_hook_errno = err;
  std::snprintf(t_hook_message, sizeof t_hook_message, "%s", message.c_str());
}

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// The kernel's default hugepage size (MAP_HUGETLB without a size flag).
size_t HugepageSize() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (meminfo >> key) {
    if (key == "Hugepagesize:" && (meminfo >> kib) && kib != 0) return kib << 10;
  }
  return size_t{2} << 20;
}

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) & ~(to - 1); }

int Mallctl(const std::string& name, void* oldp, size_t* oldlen, void* newp, size_t newlen) {
  return mrcache_je_mallctl(name.c_str(), oldp, oldlen, newp, newlen);
}

void FillKeys(const PoolChunk& chunk, void* addr, size_t length, RegionInfo* keys) {
  keys->addr = addr;
  keys->length = length;
  keys->lkey = chunk.registration.lkey;
  keys->rkey = chunk.registration.rkey;
  keys->access = chunk.registration.access;
  keys->handle = chunk.registration.handle;
}

}  // namespace

// Placed first so that the extent_hooks_t* jemalloc passes back leads to it.
struct Pool::Hooks {
  extent_hooks_t hooks;
  Pool* pool;
};

Pool::Pool(Registrar& registrar, const Config& config, const PoolOptions& options)
    : registrar_(registrar),
      chunk_bytes_(config.pool_hugepages ? std::max(config.pool_chunk_bytes, HugepageSize())
                                         : config.pool_chunk_bytes),
      max_bytes_(config.pool_max_bytes),
      retain_bytes_(config.pool_retain_bytes),
      options_(options),
      id_(pool_internal::NewPoolId()),
      hugepages_(config.pool_hugepages),
      map_(__builtin_ctzll(chunk_bytes_)) {}

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(Registrar& registrar, const Config& config) {
  PoolOptions options;
  options.access = config.pool_access;
  return Create(registrar, config, options);
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(Registrar& registrar, const Config& config,
                                                   const PoolOptions& options) {
  absl::Status access = ValidateAccess(options.access);
  if (!access.ok()) return access;
  const size_t chunk = config.pool_chunk_bytes;
  if (chunk < (size_t{64} << 10) || (chunk & (chunk - 1)) != 0 || chunk > (size_t{1} << 40)) {
    return ErrnoStatus(
        EINVAL, absl::StrCat("pool_chunk_bytes ", chunk, " is not a power of two from 64K to 1T"));
  }
  if (config.pool_max_bytes < chunk) {
    return ErrnoStatus(EINVAL, absl::StrCat("pool_max_bytes ", config.pool_max_bytes,
                                            " is smaller than pool_chunk_bytes ", chunk));
  }
  std::unique_ptr<Pool> pool(new Pool(registrar, config, options));
  absl::Status s = pool->Init();
  if (!s.ok()) return s;
  return pool;
}

absl::Status Pool::Init() {
  pool_internal::RegisterPool(id_);
  hooks_.reset(new Hooks);
  hooks_->pool = this;
  extent_hooks_t& h = hooks_->hooks;
  h.alloc = [](extent_hooks_t* hooks, void* new_addr, size_t size, size_t alignment, bool* zero,
               bool* commit, unsigned) -> void* {
    // Growing in place at new_addr is declined; jemalloc moves the data then.
    if (new_addr != nullptr) return nullptr;
    void* p = reinterpret_cast<Hooks*>(hooks)->pool->AllocExtent(size, alignment);
    if (p == nullptr) return nullptr;
    // A range may be reused: zero it only when jemalloc needs zeroes.
    if (*zero) std::memset(p, 0, size);
    *commit = true;  // always committed: pinned pages never go away
    return p;
  };
  h.dalloc = [](extent_hooks_t* hooks, void* addr, size_t size, bool, unsigned) {
    return reinterpret_cast<Hooks*>(hooks)->pool->FreeExtent(addr, size);
  };
  // Called by arena.destroy for extents it retained; ReleaseAll unmaps chunks.
  h.destroy = [](extent_hooks_t*, void*, size_t, bool, unsigned) {};
  h.commit = [](extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) { return false; };
  // Pinned pages must never be decommitted or purged (MADV_DONTNEED would
  // swap fresh pages in under the registration): refuse.
  h.decommit = [](extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) { return true; };
  h.purge_lazy = [](extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) { return true; };
  h.purge_forced = [](extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) { return true; };
  h.split = [](extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned) { return false; };
  h.merge = [](extent_hooks_t* hooks, void* a, size_t, void* b, size_t, bool, unsigned) {
    return !reinterpret_cast<Hooks*>(hooks)->pool->SameChunk(a, b);
  };

  extent_hooks_t* hooks_ptr = &h;
  size_t len = sizeof arena_;
  t_hook_errno = 0;
  t_creating_pool = this;
  int err = mrcache_je_mallctl("arenas.create", &arena_, &len, &hooks_ptr, sizeof hooks_ptr);
  t_creating_pool = nullptr;
  if (err != 0) {
    return ErrnoStatus(err,
                       absl::StrCat("jemalloc arenas.create failed: ", std::strerror(err),
                                    t_hook_errno ? std::string(" (") + t_hook_message + ")" : ""));
  }
  arena_created_ = true;
  arena_flags_ = MALLOCX_ARENA(arena_);
  BuildSizeClasses();
  const std::string arena = absl::StrCat("arena.", arena_, ".");
  // Decay 0: an extent freed into the arena goes straight back to the dalloc
  // hook (never to MADV_DONTNEED: the purge hooks refuse), so the pool sees
  // every chunk that becomes empty.
  ssize_t immediately = 0;
  for (const char* key : {"dirty_decay_ms", "muzzy_decay_ms"}) {
    err = Mallctl(arena + key, nullptr, nullptr, &immediately, sizeof immediately);
    if (err != 0) {
      return ErrnoStatus(
          err, absl::StrCat("jemalloc ", arena, key, " = 0 failed: ", std::strerror(err)));
    }
  }
  bool retain = false;
  len = sizeof retain;
  if (mrcache_je_mallctl("opt.retain", &retain, &len, nullptr, 0) == 0 && retain) {
    Log(LogLevel::kWarning,
        "pool: jemalloc opt.retain is on (MALLOC_CONF?): jemalloc keeps the address space "
        "of freed extents, so empty chunks may never be released");
  }
  return absl::OkStatus();
}

void* Pool::MapAligned(size_t length, size_t alignment, bool hugepages, size_t* map_length) {
  const size_t page = hugepages ? HugepageSize() : PageSize();
  const size_t len = RoundUp(length, page);
  alignment = std::max(alignment, page);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (hugepages ? MAP_HUGETLB : 0);
  // Often the kernel's choice is aligned already; else map more and trim.
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if ((reinterpret_cast<uintptr_t>(p) & (alignment - 1)) != 0) {
    munmap(p, len);
    const size_t over = len + alignment;
    p = mmap(nullptr, over, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = RoundUp(raw, alignment);
    if (aligned > raw) munmap(p, aligned - raw);
    const size_t tail = over - (aligned - raw) - len;
    if (tail != 0) munmap(reinterpret_cast<void*>(aligned + len), tail);
    p = reinterpret_cast<void*>(aligned);
  }
  *map_length = len;
  return p;
}

void* Pool::AllocExtent(size_t size, size_t alignment) {
  std::lock_guard<std::mutex> lock(mu_);
  if (t_creating_pool == this) {
    size_t map_length = 0;
    void* p = MapAligned(size, alignment, false, &map_length);
    if (p == nullptr) {
      SetHookError(errno, absl::StrCat("mmap of ", size,
                                       " bytes for jemalloc metadata: ", std::strerror(errno)));
      return nullptr;
    }
    metadata_maps_.emplace_back(p, map_length);
    return p;
  }
  // An empty chunk counts in retained_bytes, except a new one (below).
  FreeRanges::Taken taken = free_.Take(size, alignment);
  bool retained = true;
  if (taken.owner == nullptr) {
    if (MapChunkLocked(size, alignment) == nullptr) return nullptr;
    taken = free_.Take(size, alignment);
    retained = false;
  }
  auto* chunk = const_cast<PoolChunk*>(static_cast<const PoolChunk*>(taken.owner));
  if (retained && chunk->free_bytes == chunk->length) stats_.retained_bytes -= chunk->length;
  chunk->free_bytes -= size;
  return reinterpret_cast<void*>(taken.start);
}

bool Pool::FreeExtent(void* addr, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* chunk = const_cast<PoolChunk*>(map_.Find(addr));
  // jemalloc's metadata mapped while the arena was created: ReleaseAll
  // unmaps it; refusing leaves it alone.
  if (chunk == nullptr) return true;
  free_.Add(reinterpret_cast<uintptr_t>(addr), size, chunk);
  chunk->free_bytes += size;
  // No buffer of this extent is live: its pages may next hold another class.
  ForgetBins(chunk, reinterpret_cast<uintptr_t>(addr) - chunk->start, size);
  if (chunk->free_bytes == chunk->length) {
    // A chunk longer than pool_chunk_bytes held one buffer; it is not kept,
    // so that it never holds several (mrcache.h's rkey scope relies on it).
    if (chunk->length <= chunk_bytes_ && stats_.retained_bytes + chunk->length <= retain_bytes_) {
      stats_.retained_bytes += chunk->length;
    } else {
      ReleaseChunkLocked(chunk);
    }
  }
  return false;
}

PoolChunk* Pool::MapChunkLocked(size_t size, size_t alignment) {
  // An extent larger than half a chunk gets a chunk of its own, as long as
  // the extent: in a shared chunk, the rest could not hold another like it.
  const size_t length = size > chunk_bytes_ / 2 ? RoundUp(size, PageSize()) : chunk_bytes_;
  if (stats_.registered_bytes + length > max_bytes_ || length > max_bytes_) {
    SetHookError(ENOMEM,
                 absl::StrCat("pool_max_bytes ", max_bytes_, " reached (", stats_.registered_bytes,
                              " bytes registered, a chunk of ", length, " more needed)"));
    return nullptr;
  }
  const size_t align = std::max(alignment, chunk_bytes_);
  bool huge = hugepages_;
  size_t map_length = 0;
  void* p = MapAligned(length, align, huge, &map_length);
  if (p == nullptr && huge) {
    Log(LogLevel::kWarning,
        absl::StrFormat("pool: pool_hugepages=1 but a MAP_HUGETLB mapping of %zu bytes failed "
                        "(%s; see /proc/sys/vm/nr_hugepages): falling back to normal pages",
                        length, std::strerror(errno)));
    hugepages_ = huge = false;
    p = MapAligned(length, align, false, &map_length);
  }
  if (p == nullptr) {
    SetHookError(ENOMEM, absl::StrCat("mmap of ", length, " bytes: ", std::strerror(errno)));
    return nullptr;
  }
  absl::StatusOr<Registration> reg = registrar_.Register(p, length, options_.access);
  if (!reg.ok()) {
    munmap(p, map_length);
    SetHookError(StatusToErrno(reg.status()),
                 absl::StrCat(registrar_.name(), " registrar refused a pool chunk of ", length,
                              " bytes: ", reg.status().message()));
    return nullptr;
  }
  PoolChunk* chunk;
  if (!unmapped_.empty()) {
    chunk = unmapped_.back();
    unmapped_.pop_back();
  } else {
    chunks_.push_back(std::make_unique<PoolChunk>());
    chunk = chunks_.back().get();
  }
  chunk->start = reinterpret_cast<uintptr_t>(p);
  chunk->length = length;
  chunk->map_length = map_length;
  chunk->hugepages = huge;
  chunk->registration = *reg;
  chunk->free_bytes = length;
  const size_t pages = length >> kBinPageShift;
  if (pages > kMaxBinPages) {
    chunk->page_bins.reset();
    chunk->page_bin_count = 0;
  } else if (chunk->page_bin_count != pages) {
    chunk->page_bins.reset(new std::atomic<uint8_t>[pages]);
    chunk->page_bin_count = pages;
  }
  ForgetBins(chunk, 0, length);
  chunk->incarnation.fetch_add(1, std::memory_order_release);
  ++stats_.registrations;
  absl::Status inserted = map_.Insert(chunk);
  if (!inserted.ok()) {
    absl::Status dereg = registrar_.Deregister(*reg);
    ++stats_.deregistrations;
    if (!dereg.ok()) {
      Log(LogLevel::kError, absl::StrCat("pool: deregistering a chunk failed: ", dereg.message()));
    }
    munmap(p, map_length);
    unmapped_.push_back(chunk);
    SetHookError(StatusToErrno(inserted), std::string(inserted.message()));
    return nullptr;
  }
  ++stats_.chunks;
  stats_.registered_bytes += length;
  stats_.hugepage_chunks += huge ? 1 : 0;
  free_.Add(chunk->start, length, chunk);
  return chunk;
}

void Pool::ForgetBins(PoolChunk* chunk, size_t offset, size_t length) {
  if (chunk->page_bins == nullptr) return;
  const size_t end = std::min(chunk->page_bin_count, (offset + length) >> kBinPageShift);
  for (size_t page = offset >> kBinPageShift; page < end; ++page) {
    chunk->page_bins[page].store(kBinUnknown, std::memory_order_relaxed);
  }
}

void Pool::ReleaseChunkLocked(PoolChunk* chunk) {
  free_.Remove(chunk->start, chunk->length);
  map_.Erase(chunk);
  chunk->incarnation.fetch_add(1, std::memory_order_release);
  absl::Status s = registrar_.Deregister(chunk->registration);
  ++stats_.deregistrations;
  if (!s.ok()) {
    Log(LogLevel::kError, absl::StrFormat("pool: deregistering chunk %p failed: %s",
                                          reinterpret_cast<void*>(chunk->start), s.message()));
  }
  munmap(reinterpret_cast<void*>(chunk->start), chunk->map_length);
  --stats_.chunks;
  stats_.registered_bytes -= chunk->length;
  stats_.hugepage_chunks -= chunk->hugepages ? 1 : 0;
  ++stats_.released_chunks;
  chunk->length = 0;
  unmapped_.push_back(chunk);
}

bool Pool::SameChunk(const void* a, const void* b) const {
  const PoolChunk* chunk = map_.Find(a);
  return chunk != nullptr && chunk == map_.Find(b);
}

const PoolChunk* Pool::FindChunk(const void* ptr) const {
  ChunkHint& hint = t_chunk_hint;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  if (hint.pool_id == id_ && addr - hint.start < hint.length &&
      hint.chunk->incarnation.load(std::memory_order_acquire) == hint.incarnation) {
    return hint.chunk;
  }
  const PoolChunk* chunk = map_.Find(ptr);
  if (chunk != nullptr) {
    hint = ChunkHint{id_, chunk->start, chunk->length, chunk,
                     chunk->incarnation.load(std::memory_order_acquire)};
  }
  return chunk;
}

int Pool::CallFlags() const {
  return arena_flags_ |
         (options_.thread_caches ? pool_internal::ThreadSlot(id_).flags : MALLOCX_TCACHE_NONE);
}

void Pool::BuildSizeClasses() {
  constexpr size_t kBinBytes = size_t{128} << 10;
  std::memset(bin_of_, kNoBin, sizeof bin_of_);
  int bins = 0;
  size_t last = 0;
  for (size_t size = 64; size <= kMagazineMaxBytes; size += 64) {
    const size_t usize = mrcache_je_nallocx(size, arena_flags_);
    if (usize == 0 || usize % 64 != 0 || usize > kMagazineMaxBytes) continue;
    if (usize != last) {
      if (bins == pool_internal::Magazine::kMaxBins) break;
      bin_depth_[bins] = static_cast<uint8_t>(std::min<size_t>(
          pool_internal::Magazine::kMaxDepth, std::max<size_t>(1, kBinBytes / usize)));
      last = usize;
      ++bins;
    }
    bin_of_[size >> 6] = static_cast<uint8_t>(bins - 1);
  }
}

absl::StatusOr<void*> Pool::Alloc(size_t size, RegionInfo* keys) {
  if (ABSL_PREDICT_FALSE(size - 1 >= kMaxRequest - 1)) {
    if (size == 0) return ErrnoStatus(EINVAL, "pool buffers cannot be empty (size 0)");
    return ErrnoStatus(ENOMEM, absl::StrCat("pool buffer of ", size, " bytes is too large"));
  }
  const size_t rounded = RoundUp(size, kMinBuffer);
  void* p;
  if (options_.thread_caches) {
    pool_internal::TcacheSlot& slot = pool_internal::ThreadSlot(id_);
    pool_internal::Magazine* magazine = slot.magazine;
    const uint8_t bin = rounded <= kMagazineMaxBytes ? bin_of_[rounded >> 6] : kNoBin;
    if (bin != kNoBin && magazine != nullptr && magazine->count[bin] != 0) {
      p = magazine->slots[bin][--magazine->count[bin]];
    } else if (bin == kNoBin && magazine != nullptr && magazine->large != nullptr &&
               rounded <= magazine->large_usize &&
               mrcache_je_nallocx(rounded, arena_flags_) == magazine->large_usize) {
      p = magazine->large;
      magazine->large = nullptr;
    } else {
      p = mrcache_je_mallocx(rounded, arena_flags_ | slot.flags);
    }
  } else {
    p = mrcache_je_mallocx(rounded, arena_flags_ | MALLOCX_TCACHE_NONE);
  }
  if (ABSL_PREDICT_FALSE(p == nullptr)) return AllocRetry(size, keys);
  if (keys != nullptr) FillKeys(*FindChunk(p), p, size, keys);
  return p;
}

absl::StatusOr<void*> Pool::AllocRetry(size_t size, RegionInfo* keys) {
  // The calling thread's cached buffers may keep whole slabs busy: give them
  // back and try once more before failing.
  t_hook_errno = 0;
  if (options_.thread_caches) pool_internal::FlushCallingThread(id_);
  void* p = mrcache_je_mallocx(RoundUp(size, kMinBuffer), CallFlags());
  if (p == nullptr) {
    if (t_hook_errno != 0) {
      return ErrnoStatus(t_hook_errno,
                         absl::StrCat("pool: no buffer of ", size, " bytes: ", t_hook_message));
    }
    return ErrnoStatus(ENOMEM, absl::StrCat("pool: no buffer of ", size, " bytes"));
  }
  if (keys != nullptr) FillKeys(*FindChunk(p), p, size, keys);
  return p;
}

absl::Status Pool::Keys(const void* ptr, RegionInfo* keys) const {
  const PoolChunk* chunk = FindChunk(ptr);
  if (chunk == nullptr) {
    return ErrnoStatus(EINVAL, absl::StrCat("address ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                                            " is not inside this pool"));
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  FillKeys(*chunk, const_cast<void*>(ptr), chunk->start + chunk->length - addr, keys);
  return absl::OkStatus();
}

absl::StatusOr<Registration> Pool::ChunkRegistration(const void* ptr) const {
  const PoolChunk* chunk = FindChunk(ptr);
  if (chunk == nullptr) {
    return ErrnoStatus(EINVAL, absl::StrCat("address ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                                            " is not inside this pool"));
  }
  return chunk->registration;
}

absl::Status Pool::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  const PoolChunk* chunk = FindChunk(ptr);
  if (ABSL_PREDICT_FALSE((reinterpret_cast<uintptr_t>(ptr) & (kMinBuffer - 1)) != 0 ||
                         chunk == nullptr)) {
    return ForeignFree(ptr);
  }
  if (!options_.thread_caches) {
    mrcache_je_dallocx(ptr, MALLOCX_TCACHE_NONE);
    return absl::OkStatus();
  }
  pool_internal::TcacheSlot& slot = pool_internal::ThreadSlot(id_);
  pool_internal::Magazine* magazine = slot.magazine;
  if (magazine != nullptr) {
    const uint8_t bin = BinOfFreed(*chunk, ptr);
    if (bin != kNoBin && magazine->count[bin] < bin_depth_[bin]) {
      magazine->slots[bin][magazine->count[bin]++] = ptr;
      return absl::OkStatus();
    }
    if (bin == kNoBin && magazine->large == nullptr) {
      const size_t usize = mrcache_je_sallocx(ptr, 0);
      if (usize <= chunk_bytes_) {
        magazine->large = ptr;
        magazine->large_usize = usize;
        return absl::OkStatus();
      }
    }
  }
  mrcache_je_dallocx(ptr, slot.flags);
  return absl::OkStatus();
}

uint8_t Pool::BinOfFreed(const PoolChunk& chunk, void* ptr) const {
  const size_t page = (reinterpret_cast<uintptr_t>(ptr) - chunk.start) >> kBinPageShift;
  if (chunk.page_bins != nullptr) {
    const uint8_t bin = chunk.page_bins[page].load(std::memory_order_relaxed);
    if (ABSL_PREDICT_TRUE(bin != kBinUnknown)) return bin;
  }
  const size_t usize = mrcache_je_sallocx(ptr, 0);
  const uint8_t bin = usize <= kMagazineMaxBytes ? bin_of_[usize >> 6] : kNoBin;
  if (chunk.page_bins != nullptr) chunk.page_bins[page].store(bin, std::memory_order_relaxed);
  return bin;
}

absl::Status Pool::ForeignFree(const void* ptr) const {
  return ErrnoStatus(EINVAL, absl::StrCat("free of ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                                          ", which is not a buffer of this pool; ignored"));
}

void Pool::Trim() {
  if (!arena_created_) return;
  if (options_.thread_caches) pool_internal::FlushCallingThread(id_);
  Mallctl(absl::StrCat("arena.", arena_, ".purge"), nullptr, nullptr, nullptr, 0);
}

PoolStats Pool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

uint64_t Pool::allocated_buffers() const {
  if (!arena_created_) return 0;
  if (options_.thread_caches) pool_internal::FlushCallingThread(id_);
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  mrcache_je_mallctl("epoch", &epoch, &len, &epoch, len);
  const std::string prefix = absl::StrCat("stats.arenas.", arena_, ".");
  uint64_t total = 0;
  for (const char* kind : {"small", "large"}) {
    uint64_t nmalloc = 0, ndalloc = 0;
    len = sizeof nmalloc;
    Mallctl(absl::StrCat(prefix, kind, ".nmalloc"), &nmalloc, &len, nullptr, 0);
    len = sizeof ndalloc;
    Mallctl(absl::StrCat(prefix, kind, ".ndalloc"), &ndalloc, &len, nullptr, 0);
    total += nmalloc - ndalloc;
  }
  return total;
}

Pool::~Pool() { ReleaseAll(); }

void Pool::ReleaseAll() {
  // Flush every thread's cache of this pool first: jemalloc requires it before
  // arena.destroy, and it makes the buffer count exact.
  pool_internal::UnregisterPool(id_);
  bool unmap = true;
  if (arena_created_) {
    const uint64_t live = allocated_buffers();
    if (live != 0) {
      Log(LogLevel::kWarning, absl::StrCat("pool: destroyed with ", live,
                                           " buffer(s) still allocated; their chunks are "
                                           "deregistered and unmapped"));
    }
    int err = Mallctl(absl::StrCat("arena.", arena_, ".destroy"), nullptr, nullptr, nullptr, 0);
    if (err != 0) {
      // jemalloc still owns the memory: deregister (no registration may
      // outlive the pool) but leave it mapped rather than pull it away.
      Log(LogLevel::kError, absl::StrFormat("pool: jemalloc arena.%u.destroy failed (%s); its "
                                            "chunks stay mapped",
                                            arena_, std::strerror(err)));
      unmap = false;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::unique_ptr<PoolChunk>& chunk : chunks_) {
    if (chunk->length == 0) continue;  // released already
    map_.Erase(chunk.get());
    absl::Status s = registrar_.Deregister(chunk->registration);
    ++stats_.deregistrations;
    if (!s.ok()) {
      Log(LogLevel::kError, absl::StrFormat("pool: deregistering chunk %p failed: %s",
                                            reinterpret_cast<void*>(chunk->start), s.message()));
    }
    if (unmap) munmap(reinterpret_cast<void*>(chunk->start), chunk->map_length);
    chunk->length = 0;
  }
  stats_.chunks = 0;
  stats_.registered_bytes = 0;
  stats_.hugepage_chunks = 0;
  stats_.retained_bytes = 0;
  if (unmap) {
    for (const auto& m : metadata_maps_) munmap(m.first, m.second);
  }
  metadata_maps_.clear();
}

}  // namespace mrcache
