/* mrcache.h: the C API of mrcache, a memory-registration cache and pool for RDMA.
 *
 * A cache sits between an application (or runtime) and a registrar (rdma-core
 * verbs, io_uring fixed buffers, a simulator, or the caller's own callbacks).
 * mrc_get returns a referenced region covering [addr, addr+length) with
 * compatible access rights; mrc_put drops the reference. Unused regions stay
 * registered (lazy deregistration) until a limit forces eviction, or until the
 * memory they cover disappears (a memory monitor, or mrc_invalidate).
 *
 * Conventions: functions return 0 or a positive errno value unless stated.
 * Access flags are IBV_ACCESS_* bits. A region returned by mrc_get never grants
 * remote rights the caller did not ask for, and always grants the local ones it
 * asked for. Every registration the cache makes is deregistered by the time
 * mrc_cache_destroy returns.
 *
 * Remote keys (config key remote_keys). With remote_keys=shared (the default)
 * a region with remote rights is cached and shared, and its rkey reaches no
 * more than the union of the page-rounded ranges that mrc_get calls with
 * exactly those remote rights requested (overlapping requests merge); bridging
 * and alignment above the page size never widen it. A peer given the rkey can
 * therefore also reach the rest of the buffer's pages and overlapping buffers
 * requested with the same rights, until the region is deregistered (the
 * retire callback says when), which may be long after mrc_put. With
 * remote_keys=private every mrc_get with a remote right registers exactly
 * [addr, addr+length) for that caller alone and mrc_put deregisters it, like
 * ibv_reg_mr/ibv_dereg_mr; local-only requests are still cached.
 * mrc_stats_t.remote_private counts those private registrations.
 *
 * Pinned-memory budget. Without CAP_IPC_LOCK, every page a registration pins
 * counts against RLIMIT_MEMLOCK (ibv_reg_mr per process, io_uring per user).
 * At mrc_cache_create the cache works out the bytes it may pin: the soft
 * RLIMIT_MEMLOCK minus a headroom for the application's own pins (1/8 of the
 * limit, at least 64 KiB, at most half), or no limit if RLIMIT_MEMLOCK is
 * unlimited or the process has CAP_IPC_LOCK; max_bytes lowers it further.
 * All caches of a process share that budget: a cache short of room first
 * evicts its own unused regions (only until the request fits: the largest
 * not used since it was registered, a merge union weighed by the regions it
 * merged, else the least recently used), then asks the other caches for theirs. A miss larger than
 * a quarter of the budget that does not fit beside the pinned bytes gets a registration for itself,
 * deregistered at mrc_put (counted in mrc_stats_t.bypassed), unless the same pages were served so
 * among the last 4 such misses. A miss plans a merged, bridged or aligned region only while it fits
 * without evicting; the requested pages themselves are always tried. If the registrar still refuses
 * (ENOMEM or EAGAIN) although the request fits the budget, something else pins too: the budget is
 * lowered to what was pinned then and recovers gradually (it is forgotten when the last cache of
 * the process is destroyed). A request that cannot fit even with every unused region gone fails
 * with ENOMEM (EAGAIN if that is what the registrar said), whose message names the limit and the
 * bytes pinned; regions in use are never evicted. The budget applies only to registrations that pin
 * memory counted against RLIMIT_MEMLOCK: verbs and uring do; on-demand
 * paging (odp) and sim without sim_mlock pin nothing and have no budget; a
 * custom registrar (mrc_cache_create_custom) is taken to pin, as callbacks
 * calling ibv_reg_mr do, unless its config sets custom_pins=0.
 * mrc_stats_t.pin_budget_bytes is the budget now (0 = no limit).
 *
 * Thread safety: every function may be called from any thread, concurrently,
 * except that mrc_cache_destroy must not race with other calls on that cache,
 * and a config must not be modified while another thread reads it.
 */
#ifndef MRCACHE_MRCACHE_H_
#define MRCACHE_MRCACHE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_pd;

/* ---- configuration ------------------------------------------------------
 * Keys equal the MRCACHE_* environment names, lower-case, without the prefix
 * (registrar, max_regions, max_bytes, max_merge_bytes, bridge_bytes,
 * alignment, remote_keys, monitor, odp, odp_prefetch_bytes, sim_*, pool_*,
 * uring_slots, custom_pins). The default monitor, `auto`, adds uffd in a
 * process with a sanitizer runtime (its allocator unmaps with inline system
 * calls; logged once). `mrcache-info --config-table` prints every key with what it
 * accepts and its default, from the library's own table; mrcache(7) and
 * README.md ("Configuration") explain them.
 */
typedef struct mrc_config mrc_config_t;
/* Creates a config holding the defaults, then every MRCACHE_<KEY> variable of
 * the environment. Returns 0 and sets *cfg; EINVAL if cfg is NULL or a
 * variable has a bad value (logged, naming it); ENOMEM. The first call in a
 * process also warns about MRCACHE_* variables mrcache does not read. */
int mrc_config_create(mrc_config_t **cfg);
/* Sets one key from its text form (sizes accept K, M, G, T suffixes).
 * Returns 0; EINVAL if an argument is NULL, the key is unknown or the value
 * is malformed or out of range, and then the config is unchanged. */
int mrc_config_set(mrc_config_t *cfg, const char *key, const char *value);
/* Copies the value of `key`, NUL-terminated, in the form mrc_config_set
 * accepts, into buf. Returns 0; EINVAL if an argument is NULL; ENOENT for an
 * unknown key; ERANGE if buflen cannot hold the value and its NUL. */
int mrc_config_get(const mrc_config_t *cfg, const char *key, char *buf, size_t buflen);
/* Frees a config (NULL is ignored). Caches created from it keep their copy. */
void mrc_config_destroy(mrc_config_t *cfg);

/* ---- cache ------------------------------------------------------------- */
typedef struct mrc_cache mrc_cache_t;
typedef struct mrc_region mrc_region_t;
typedef struct {
  void *addr;    /* start of the registered range (may be wider than requested) */
  size_t length; /* its length */
  uint32_t lkey;
  uint32_t rkey;
  int access; /* the access flags it was registered with */
} mrc_region_info_t;

/* Creates a cache with the registrar and monitor `cfg` names (NULL: the
 * defaults, then the environment). `pd` is the protection domain of the
 * verbs registrar and is ignored by the others; the cache does not own it.
 * Returns 0 and sets *cache; EINVAL for a NULL cache, registrar=verbs
 * without a pd, or a bad config; EOPNOTSUPP for an ODP mode the registrar or
 * device lacks; ENOMEM. Why a creation failed is also logged. */
int mrc_cache_create(const mrc_config_t *cfg, struct ibv_pd *pd, mrc_cache_t **cache);
/* Deregisters every registration the cache made and frees it (NULL is
 * ignored). Regions still held are deregistered too, with a warning naming
 * how many; their mrc_region_t pointers become invalid. Must not race with
 * any other call on this cache. */
void mrc_cache_destroy(mrc_cache_t *cache);
/* Returns, in *region, a referenced region whose registration covers
 * [addr, addr+length) with `access` (IBV_ACCESS_* bits): the same remote
 * rights, never more, and at least the local ones. A hit takes no lock and
 * calls no registrar; a miss registers (possibly a wider, merged range; see
 * mrc_region_info) outside any lock. The reference keeps the registration
 * valid until mrc_put, even if the memory is released meanwhile.
 * Returns 0; EINVAL for NULL arguments, length 0, a range that wraps or
 * ends in the last page, unknown or inconsistent access bits (remote write or
 * atomic without local write); EFAULT for memory that is not mapped or
 * cannot be registered with `access`; ENOMEM when the pin budget or the
 * registrar is out of room (the message names the limit); EAGAIN only if the
 * requested memory itself kept being released while it was registered;
 * EOPNOTSUPP for IBV_ACCESS_ON_DEMAND without ODP; ECHILD in a fork child
 * (the cache belongs to the parent); or the custom registrar's errno.
 * Thread-safe. */
int mrc_get(mrc_cache_t *cache, void *addr, size_t length, int access, mrc_region_t **region);
/* Drops one reference taken by mrc_get. The registration stays cached
 * (unused, least recently used last) unless its memory was released
 * meanwhile, in which case the last put deregisters it. Returns 0; EINVAL
 * for NULL arguments or a region with no reference left (a double put), and
 * the cache is unchanged then. Thread-safe; any thread may put a region
 * another thread got. */
int mrc_put(mrc_cache_t *cache, mrc_region_t *region);
/* Fills *info with the range actually registered (which may be wider than the
 * request), its keys and access flags. `region` must be held (between
 * mrc_get and mrc_put); a NULL info is ignored. Lock-free. */
void mrc_region_info(const mrc_region_t *region, mrc_region_info_t *info);
/* Tells the cache that [addr, addr+length) no longer holds the pages it had
 * (for memory no monitor sees, e.g. with monitor=none). Unused regions that
 * overlap it are deregistered before the call returns, and so are the
 * cache's registrations still waiting for the background thread (async_dereg);
 * held ones leave the cache and are deregistered by their last put before it
 * returns (on the calling thread, with async_dereg too); a miss registering
 * that memory meanwhile is retried. Returns 0; EINVAL for a NULL cache, length 0
 * or a range that wraps; ECHILD in a fork child. Thread-safe. */
int mrc_invalidate(mrc_cache_t *cache, void *addr, size_t length);
/* Deregisters every unused region now; held ones are untouched. Returns 0;
 * EINVAL for a NULL cache; ECHILD in a fork child. Thread-safe. */
int mrc_flush(mrc_cache_t *cache);
/* Writes `length` bytes from src at `offset` into the region through the
 * registration, as a device would (uring: a fixed-buffer read from a memfd),
 * so that a stale registration is visible to the caller. Returns 0; EINVAL
 * for NULL arguments or a range outside the region; ENOTSUP where the
 * registrar cannot write through its registrations. Thread-safe. */
int mrc_region_device_write(mrc_cache_t *cache, mrc_region_t *region, size_t offset,
                            const void *src, size_t length);

/* Runtimes plug in their own registration (e.g. one region on several NICs), as
 * with ucs_rcache's ops. Called without any cache lock held; may allocate;
 * returns 0 or an errno value. */
typedef struct {
  int (*reg)(void *ctx, void *addr, size_t length, int access, uint64_t *handle, uint32_t *lkey,
             uint32_t *rkey);
  int (*dereg)(void *ctx, uint64_t handle);
} mrc_registrar_ops_t;
/* Like mrc_cache_create, with `ops` (copied) called with `ctx` instead of a
 * built-in registrar. The callbacks' registrations are taken to pin memory
 * counted against RLIMIT_MEMLOCK, so the pin budget applies, unless cfg sets
 * custom_pins=0 (callbacks that pin nothing). Returns 0; EINVAL if ops, ops->reg, ops->dereg or
 * cache is NULL, or for a bad config; ENOMEM. */
int mrc_cache_create_custom(const mrc_config_t *cfg, const mrc_registrar_ops_t *ops, void *ctx,
                            mrc_cache_t **cache);
/* The handle the registrar returned for this held region (0 for NULL). */
uint64_t mrc_region_handle(const mrc_region_t *region);

/* ---- rails: one cache over several protection domains -------------------
 * A rails cache spans npds PDs (rails; one per NIC, say) and registers each
 * region lazily, only on the rails its gets ask for: a get that finds the
 * region registers it on each asked rail it is not on yet (outside any lock;
 * a get whose region already has every asked rail calls no registrar), as
 * UCX's md_map does. Invalidation, eviction and flush take a region off every
 * rail at once. Each rail's registration pins, and counts against the pin
 * budget. remote_keys applies per rail (private: each get with a remote
 * right registers exactly its bytes, on its asked rails, for itself). A
 * region that merges others is registered on the rails of the get that
 * merged them; the other rails are added again by the gets that ask for them.
 * On such a cache mrc_get(...) is mrc_get_rails(..., 1, ...) (rail 0), and
 * mrc_region_info reports rail 0's keys (0 if the region is not on rail 0);
 * mrc_region_handle and the retire callback's handle identify the region, not
 * a rail's registration. On-demand paging (odp) is not available with rails.
 * mrc_stats_t counts each rail's registration, as the pin budget and
 * mrc_rail_stats do: registrations, deregistrations, pinned_bytes,
 * peak_pinned_bytes and registrar_ns are the sums over the rails (a region on
 * three rails is three registrations and pins its bytes three times);
 * regions counts each region once. max_bytes bounds the bytes registered
 * over every rail: a get that leaves more evicts unused regions. */

/* Like mrc_cache_create over pds[0..npds-1] (the cache does not own them):
 * the config's registrar (verbs unless it names another) is built once per
 * PD. Returns 0;
 * EINVAL for NULL cache or pds, npds outside 1..64, a NULL pd with registrar
 * verbs or a bad config; EOPNOTSUPP with odp other than off; ENOMEM. */
int mrc_cache_create_rails(const mrc_config_t *cfg, struct ibv_pd *const *pds, int npds,
                           mrc_cache_t **cache);
/* mrc_get on the rails of `rails`, a bitmask of PD indices (bit i: pds[i]):
 * the region returned is registered on every asked rail (mrc_region_rail_info
 * gives each rail's keys). Returns what mrc_get returns, and EINVAL for rails
 * 0 or with a bit at or above the cache's rail count (a cache made by
 * mrc_cache_create or mrc_cache_create_custom has one rail, 0). */
int mrc_get_rails(mrc_cache_t *cache, void *addr, size_t length, int access, uint64_t rails,
                  mrc_region_t **region);
/* Fills *info with the held region's registration on rail `rail`. Returns 0;
 * EINVAL for NULL arguments or rail outside 0..63; ENOENT if the region is not
 * registered on that rail (no get of it asked for that rail). Lock-free. */
int mrc_region_rail_info(const mrc_region_t *region, int rail, mrc_region_info_t *info);

/* The custom registrar's callbacks with the rail (0..nrails-1) to register
 * on; called as mrc_registrar_ops_t's are. */
typedef struct {
  int (*reg)(void *ctx, int rail, void *addr, size_t length, int access, uint64_t *handle,
             uint32_t *lkey, uint32_t *rkey);
  int (*dereg)(void *ctx, int rail, uint64_t handle);
} mrc_rail_registrar_ops_t;
/* Like mrc_cache_create_custom, as a rails cache over `nrails` rails (1..64)
 * registered through `ops` (copied). Returns 0; EINVAL if ops, ops->reg,
 * ops->dereg or cache is NULL, nrails is outside 1..64, or for a bad config;
 * ENOMEM. */
int mrc_cache_create_custom_rails(const mrc_config_t *cfg, const mrc_rail_registrar_ops_t *ops,
                                  void *ctx, int nrails, mrc_cache_t **cache);

/* Counters of one rail of a cache. */
typedef struct {
  uint64_t registrations;    /* registrations made on this rail */
  uint64_t deregistrations;  /* of those, deregistered */
  uint64_t regions;          /* regions registered on this rail now */
  uint64_t registered_bytes; /* bytes registered on this rail now */
  uint64_t registrar_ns;     /* time spent in this rail's registrar calls */
} mrc_rail_stats_t;
/* Copies rail `rail`'s counters into *stats; a cache with one rail (not made
 * by a *_rails call) reports its registrations as rail 0's. Returns 0; EINVAL
 * for NULL arguments; ENOENT for a rail at or above mrc_cache_rails(cache). */
int mrc_rail_stats(const mrc_cache_t *cache, int rail, mrc_rail_stats_t *stats);
/* The number of rails of the cache (1 unless made by a *_rails call; 0 for
 * NULL). */
int mrc_cache_rails(const mrc_cache_t *cache);

/* Counters of one cache. Fields are only ever appended, never reordered: an
 * application built against an older mrcache.h passes the size of its smaller
 * struct (see mrc_stats) and the library writes only that many bytes. */
typedef struct {
  uint64_t hits, misses, registrations, deregistrations, evictions, invalidations, merges, regions,
      pinned_bytes, registrar_ns;
  uint64_t peak_pinned_bytes, registrar_failures,
      bypassed; /* registered for one get alone, deregistered at its put: MW_BIND, ZERO_BASED,
                   misses too large for the pin budget ("Pinned-memory budget"), first
                   misses of a full cache (README, "Admission when the cache is full"), and
                   misses over memory the monitor could not watch (watch_failures) */
  uint64_t
      remote_private; /* requests with remote rights registered privately (remote_keys=private) */
  uint64_t monitor_incomplete; /* 1: the monitor reports less than `auto` promises (cause logged at
                                  creation) */
  uint64_t pin_budget_bytes;   /* bytes this cache may pin now, shared with the process's other
                                  caches (see "Pinned-memory budget"); 0 = no limit */
  /* Registered ranges the monitor could not watch (monitor uffd; never silent):
   * watch_failures is the sum of the causes that follow. Such a registration
   * is never cached: it serves its get alone (counted in bypassed), except
   * for watch_enomem, where the memory was changing and the get retries. */
  uint64_t watch_failures;
  uint64_t watch_enomem;    /* part of the range unmapped, or the kernel out of memory */
  uint64_t watch_ebusy;     /* the application watches that memory with its own userfaultfd */
  uint64_t watch_eperm;     /* the kernel refused */
  uint64_t watch_einval;    /* memory userfaultfd cannot track (most file mappings, SysV shm) */
  uint64_t watch_map_limit; /* not watched, to keep the map count below 3/4 of vm.max_map_count */
  uint64_t watch_other;     /* any other cause (ECHILD: a cache inherited by a fork child) */
  /* async_dereg (README): registrations that left the cache and wait for the
   * background deregistration thread now (or are being deregistered by it),
   * still counted in pinned_bytes; and the nanoseconds this cache's callers
   * spent waiting for that thread, or deregistering its queued regions
   * themselves meanwhile (pin budget refusals, mrc_flush, destroy). */
  uint64_t dereg_queue_depth;
  uint64_t dereg_wait_ns;
  /* async_dereg: the nanoseconds the background deregistration thread spent
   * deregistering this cache's registrations (retire callbacks included). */
  uint64_t background_dereg_ns;
} mrc_stats_t;
/* Copies the cache's counters into the first `size` bytes of *stats: the
 * fields that lie wholly inside `size` bytes are set, bytes past the end of
 * this library's mrc_stats_t (a caller built against a newer header) are
 * zeroed, nothing past `size` bytes is written. Returns 0, or EINVAL if cache
 * or stats is NULL or size is 0. Thread-safe; the counters are read without
 * stopping other threads, so they need not be mutually consistent. */
int mrc_stats_sized(const mrc_cache_t *cache, mrc_stats_t *stats, size_t size);
/* mrc_stats(cache, &stats) passes the size of the mrc_stats_t this
 * application was compiled with, so that a newer library never writes past
 * it. */
#define mrc_stats(cache, stats) mrc_stats_sized((cache), (stats), sizeof(mrc_stats_t))
/* The entry point that binaries built before mrc_stats_sized existed call:
 * writes the 14 fields of that header's mrc_stats_t (hits .. remote_private)
 * and nothing beyond. New code gets it through the macro above. */
void(mrc_stats)(const mrc_cache_t *cache, mrc_stats_t *stats);
/* A sentence describing an errno value as mrcache's functions mean it
 * (static storage; never NULL). Thread-safe. */
const char *mrc_strerror(int err);

/* ---- messages -------------------------------------------------------------
 * Warnings and errors mrcache reports to a person (a cache destroyed with
 * regions held, a monitor that cannot be installed, a bad MRCACHE_* variable)
 * go to stderr as "mrcache: <message>" unless a callback is set. */
typedef enum { MRC_LOG_ERROR = 0, MRC_LOG_WARNING = 1, MRC_LOG_INFO = 2 } mrc_log_level_t;
typedef void (*mrc_log_cb_t)(void *arg, int level /* mrc_log_level_t */, const char *message);
/* Sends every later message to fn (one line, no newline; valid only during
 * the call) instead of stderr; NULL restores stderr. To silence mrcache, pass
 * a function that does nothing. Process-wide, thread-safe; fn may be called
 * from any thread, never with a cache lock held and never from a memory hook. */
void mrc_set_log_callback(mrc_log_cb_t fn, void *arg);

/* Called once per retired region (invalidated, evicted, merged away, flushed or
 * destroyed) after its registration is released, never from inside a memory
 * hook and never with a cache lock held. With async_dereg (mrcache(7)) it may
 * run on the process's background deregistration thread, after the get, put
 * or flush that retired the region has returned, or on a thread that waits
 * for that thread's queue (mrc_flush, mrc_cache_destroy, a get short of pin
 * budget, fork) and deregisters queued regions itself meanwhile; mrc_flush and
 * mrc_cache_destroy return only after it ran for every region they retired.
 * NULL removes the callback. */
typedef void (*mrc_retire_cb_t)(void *arg, void *addr, size_t length, uint64_t handle);
/* Returns 0; EINVAL for a NULL cache. Thread-safe; takes effect for regions
 * retired after it returns. */
int mrc_set_retire_callback(mrc_cache_t *cache, mrc_retire_cb_t fn, void *arg);

/* ---- pool of pre-registered buffers -------------------------------------- */
/* In libmrcache_pool.so (-lmrcache_pool). Buffers come from chunks of
 * pool_chunk_bytes (aligned to pool_chunk_bytes; a buffer larger than half
 * that gets a chunk of its own, as long as the buffer), each registered once through `cache` with
 * the rights of pool_access. A freed buffer is reused by later allocations; a chunk whose buffers
 * are all free is kept registered up to pool_retain_bytes of such chunks (never one longer than
 * pool_chunk_bytes), else deregistered and unmapped. All pool functions are thread-safe.
 *
 * What an rkey reaches: a buffer's keys are those of its whole chunk, so with
 * a remote right in pool_access (default local_write: none) the rkey of a
 * buffer p lets a peer read or write every byte of p's chunk,
 * [p rounded down to a multiple of the chunk size, keys.addr + keys.length)
 * as mrc_pool_keys(p) reports it (the chunk size is pool_chunk_bytes, or the
 * huge page size if larger with pool_hugepages=1) -- other buffers of the pool included, and
 * whatever the chunk holds later -- until the chunk is deregistered (released
 * empty, or mrc_pool_destroy). Hand a pool buffer's rkey only to a peer
 * trusted with the whole chunk; for an rkey scoped to one buffer, register
 * that buffer with mrc_get (remote_keys=private). */
typedef struct mrc_pool mrc_pool_t;
/* Creates a pool on `cache` (which must outlive it) with `cfg`'s pool_* keys
 * (NULL: defaults, then the environment). Returns 0 and sets *pool; EINVAL
 * for NULL cache or pool or a bad config; ENOMEM. */
int mrc_pool_create(mrc_cache_t *cache, const mrc_config_t *cfg, mrc_pool_t **pool);
/* Returns a buffer of at least `size` bytes inside one registered chunk and,
 * if keys is not NULL, the keys that cover [ptr, ptr+size) (keys.length =
 * size; the rkey reaches the whole chunk, see above). On failure returns NULL
 * with errno set: EINVAL (NULL pool, size 0), ENOMEM (past pool_max_bytes or
 * the pin budget). */
void *mrc_pool_alloc(mrc_pool_t *pool, size_t size, mrc_region_info_t *keys);
/* The keys of the chunk that holds ptr, found from any address inside it:
 * keys.addr = ptr and keys.length = the bytes from ptr to the chunk's end,
 * keys.access = pool_access. With remote rights the rkey reaches the whole
 * chunk (see above), not only the buffer. Returns 0; EINVAL for NULL
 * arguments or a ptr not from this pool. */
int mrc_pool_keys(mrc_pool_t *pool, const void *ptr, mrc_region_info_t *keys);
/* Returns a buffer to the pool (NULL is ignored) for reuse; its chunk stays
 * registered while it holds another buffer or is kept (pool_retain_bytes). */
void mrc_pool_free(mrc_pool_t *pool, void *ptr);
/* Deregisters the pool's chunks and frees it (NULL is ignored); buffers
 * still allocated are reported through the log and become invalid. */
void mrc_pool_destroy(mrc_pool_t *pool);

#ifdef __cplusplus
}
#endif

#endif /* MRCACHE_MRCACHE_H_ */
