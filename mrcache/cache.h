// cache.h: the C++ API of mrcache (the C API in mrcache.h wraps it).
//
// A Cache maps byte ranges to registrations. Get(addr, len, access) returns a
// referenced Region that covers the (aligned) range and is compatible with
// `access`: the same remote rights (never more) and a superset of the local
// ones. A hit never calls the registrar. Put drops the reference; an unused
// region stays registered on an LRU list until a limit (max_regions,
// max_bytes) evicts it, until the registrar runs out of resources, or until
// the memory it covers disappears.
//
// Region lifecycle (RegionState in region.h; each transition under the cache
// lock):
//   kCached, in use (references > 0) --last put--> kCached, unused (on the LRU)
//   kCached, unused --get--> kCached, in use
//   kCached, unused --evict/invalidate/flush--> kDead (deregistered, freed)
//   kCached, in use --invalidate/merge--> kInvalid (out of the index; its
//                                         holders keep it until their last
//                                         put, then it becomes kDead)
//
// Locking invariant: no cache lock is held across a registrar call, a monitor
// call, or an allocation that can reach the system allocator's unmapping
// paths. Register and Deregister happen outside the lock; after registering,
// the miss path re-validates under the lock and discards its registration if
// an invalidation touched the range meanwhile.
//
// Invalidation (memory hooks): OnMemoryRelease never takes the lock, never
// allocates, never deregisters; it records the range in a bounded,
// preallocated ring and bumps the release generations of the buckets the
// range overlaps. The next get that leaves the fast path (of any
// thread), Flush or Invalidate drains the ring under the lock. A range that finds the ring full
// is kept as part of one 2 MiB-aligned hull of such ranges, drained last:
// releases are never lost, only coarsened.
//
// Fast path: each thread keeps a small table of recent lookups per cache and
// its own reference slots, so a hit writes only thread-local memory. A
// reclaimer (eviction, invalidation, merge, flush) marks the slots naming the
// region retired, issues an asymmetric memory barrier (membarrier), and only
// then sums the per-thread counters: a concurrent hit either sees the mark
// and backs off, or its increment is counted. core/cache_impl.h states the
// whole protocol.
#ifndef MRCACHE_CACHE_H_
#define MRCACHE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/rails_registrar.h"

struct ibv_mr;
struct ibv_pd;

namespace mrcache {

class Region;
class CacheImpl;
class StatsPublication;
class Cache;

struct RegionInfo {
  void* addr = nullptr;  // the registered range (aligned; may be wider than requested)
  size_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  int access = 0;
  uint64_t handle = 0;   // what the registrar returned
  ibv_mr* mr = nullptr;  // the verbs registrar's memory region, else nullptr
};

// Same fields and meaning as mrc_stats_t.
struct CacheStats {
  uint64_t hits = 0, misses = 0, registrations = 0, deregistrations = 0, evictions = 0,
           invalidations = 0, merges = 0, regions = 0, pinned_bytes = 0, registrar_ns = 0;
  uint64_t peak_pinned_bytes = 0, registrar_failures = 0, bypassed = 0;
  uint64_t remote_private = 0;  // requests that took the remote_keys=private path
  // 1 if the monitor in effect reports less than its name promised (`auto`
  // without patch); the cause was logged on stderr at creation.
  uint64_t monitor_incomplete = 0;
  uint64_t pin_budget_bytes = 0;  // bytes this cache may pin now (pin_budget.h); 0 = no limit
  // Registered ranges the monitor could not watch (uffd: monitor.h,
  // WatchFailureCounts); watch_failures is the sum of the causes after it.
  uint64_t watch_failures = 0, watch_enomem = 0, watch_ebusy = 0, watch_eperm = 0, watch_einval = 0,
           watch_map_limit = 0, watch_other = 0;
  // async_dereg: this cache's regions waiting in (or being deregistered by)
  // the background deregistration queue now, and the nanoseconds its threads
  // spent waiting for that queue, or deregistering its regions themselves
  // meanwhile (ENOMEM, flush, destroy).
  uint64_t dereg_queue_depth = 0, dereg_wait_ns = 0;
  // async_dereg: the nanoseconds the background thread spent deregistering
  // this cache's regions (retire callbacks included).
  uint64_t background_dereg_ns = 0;
};

// The registered range and keys of a region the caller holds (of a rails
// cache: rail 0's keys, 0 if the region is not on rail 0).
RegionInfo GetRegionInfo(const Region* region);
// The region's registration on rail `rail` (a region of a one-rail cache is
// on rail 0): ENOENT if it is not registered there, EINVAL for a null region
// or a rail outside 0..kMaxRails-1. The caller holds the region.
absl::StatusOr<RegionInfo> GetRegionRailInfo(const Region* region, int rail);

// A move-only owning reference: Put on destruction.
class RegionRef {
 public:
  RegionRef() = default;
  RegionRef(Cache* cache, Region* region) : cache_(cache), region_(region) {}
  RegionRef(RegionRef&& other) noexcept { *this = std::move(other); }
  RegionRef& operator=(RegionRef&& other) noexcept;
  RegionRef(const RegionRef&) = delete;
  RegionRef& operator=(const RegionRef&) = delete;
  ~RegionRef() { reset(); }

  RegionInfo info() const { return GetRegionInfo(region_); }
  Region* get() const { return region_; }
  explicit operator bool() const { return region_ != nullptr; }
  // Puts the region now.
  void reset();
  // Gives up ownership without putting; the caller must Put the result.
  Region* release();

 private:
  Cache* cache_ = nullptr;
  Region* region_ = nullptr;
};

class Cache {
 public:
  using RetireCallback = std::function<void(void* addr, size_t length, uint64_t handle)>;

  // A cache over the registrar named by config.registrar (verbs needs `pd`).
  static absl::StatusOr<std::unique_ptr<Cache>> Create(const Config& config, ibv_pd* pd = nullptr);
  // A cache over a registrar the caller built (custom callbacks, fault injection, ...).
  static absl::StatusOr<std::unique_ptr<Cache>> Create(const Config& config,
                                                       std::unique_ptr<Registrar> registrar);
  // A rails cache (mrc_cache_create_rails) over one registrar per rail
  // (1..kMaxRails of one kind): EINVAL otherwise; EOPNOTSUPP with config.odp
  // other than off.
  static absl::StatusOr<std::unique_ptr<Cache>> CreateRails(
      const Config& config, std::vector<std::unique_ptr<Registrar>> rails);
  // A rails cache over the registrar config.registrar names, built once per
  // PD of pds[0..npds-1]; EINVAL for npds outside 1..kMaxRails or null pds.
  static absl::StatusOr<std::unique_ptr<Cache>> CreateRails(const Config& config,
                                                            ibv_pd* const* pds, int npds);
  // Deregisters everything (see mrc_cache_destroy).
  ~Cache();

  // A get of [addr, addr + length) with `access`, the reference owned by the
  // returned RegionRef, which puts it when destroyed: the C++ way.
  absl::StatusOr<RegionRef> Get(void* addr, size_t length, int access);
  // The same get, the reference owned by the caller, who gives it up with
  // exactly one Put (the C API's mrc_get / mrc_put).
  absl::StatusOr<Region*> Acquire(void* addr, size_t length, int access);
  // Get and Acquire on the rails of the bitmask `rails` (mrc_get_rails): the
  // region is registered on each of them when returned. EINVAL for rails 0
  // or a bit at or above rail_count(). Get and Acquire mean rail 0.
  absl::StatusOr<RegionRef> GetRails(void* addr, size_t length, int access, uint64_t rails);
  absl::StatusOr<Region*> AcquireRails(void* addr, size_t length, int access, uint64_t rails);
  // Gives up one reference Acquire returned. EINVAL for a null region, one
  // of another cache, or a region put more times than it was got.
  absl::Status Put(Region* region);
  absl::Status Invalidate(void* addr, size_t length);
  absl::Status Flush();
  absl::Status DeviceWrite(Region* region, size_t offset, const void* src, size_t length);
  CacheStats stats() const;
  // The number of rails (1 unless made by CreateRails).
  int rail_count() const;
  // Counters of rail `rail`; a one-rail cache reports its own as rail 0's.
  // ENOENT for a rail at or above rail_count().
  absl::StatusOr<RailStats> rail_stats(int rail) const;
  // Called as mrc_set_retire_callback's function is (mrcache.h): after the
  // region's deregistration, possibly on the background deregistration thread
  // or on a thread waiting for its queue.
  void SetRetireCallback(RetireCallback callback);

  const Config& config() const;
  Registrar& registrar();
  // The monitor(s) in effect, e.g. "patch+uffd" or "none".
  std::string monitor_name() const;

 private:
  explicit Cache(std::unique_ptr<CacheImpl> impl);
  // A cache over `registrar`, published (stats_shm) with the rails of
  // `rails`: the same registrar as a RailsRegistrar for a rails cache, else
  // null.
  static absl::StatusOr<std::unique_ptr<Cache>> CreateOver(const Config& config,
                                                           std::unique_ptr<Registrar> registrar,
                                                           RailsRegistrar* rails);
  // Registers the held region on the rails of `missing` it lacks, making
  // room under the pin budget first and once more after a refusal.
  absl::Status CompleteRails(Region* region, uint64_t missing);
  // Evicts unused regions while the bytes registered over every rail exceed
  // config.max_bytes (a region counts once per rail it is on).
  void KeepRailsWithinMaxBytes();
  std::unique_ptr<CacheImpl> impl_;
  // The registrar of a rails cache (owned by impl_), else null.
  RailsRegistrar* rails_ = nullptr;
  // config.max_bytes of a rails cache (0: no limit).
  size_t rails_max_bytes_ = 0;
  // The cache's slot in the live statistics page (stats_shm); null when
  // unpublished. Declared after impl_: it ends before the cache does.
  std::unique_ptr<StatsPublication> published_;
};

// Builds the registrar config.registrar names ("" picks uring if it works,
// else sim). verbs requires a non-null pd (EINVAL otherwise). The pinning
// ones (uring, verbs) come wrapped by WithPrefault (registrars/prefault.h)
// unless config.prefault_bytes is 0.
absl::StatusOr<std::unique_ptr<Registrar>> CreateRegistrar(const Config& config, ibv_pd* pd);

}  // namespace mrcache

#endif  // MRCACHE_CACHE_H_
