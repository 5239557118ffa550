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
 * evicts its own unused regions (least recently used first, only until the
 * request fits), then asks the other caches for theirs. A miss plans a
 * merged, bridged or aligned region only while it fits without evicting;
 * the requested pages themselves are always tried. If the registrar still refuses (ENOMEM or
 * EAGAIN) although the request fits the budget, something else pins too: the
 * budget is lowered to what was pinned then and recovers gradually. A
 * request that cannot fit even with every unused region gone fails with
 * ENOMEM (EAGAIN if that is what the registrar said), whose message names
 * the limit and the bytes pinned; regions in use
 * are never evicted. On-demand paging (odp) pins nothing and has no budget.
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
 * Keys equal the MRCACHE_* environment names, lower-case, without the prefix:
 *   registrar        uring|sim|verbs (default: uring where io_uring works, else sim)
 *   max_regions      unused+used regions kept (default 16384; 0 = unlimited)
 *   max_bytes        pinned bytes kept (default 0 = unlimited; suffixes K M G accepted); also
 *                    caps the cache's pin budget (see "Pinned-memory budget" below)
 *   max_merge_bytes  largest region a merge may create (default 1G; 0 = merging off)
 *   bridge_bytes     block within which a miss in stable memory registers the resident rest
 *                    of its mapping once another region is there (default 128M; 0 = off;
 *                    needs monitor patch or uffd, or odp explicit)
 *   alignment        region granularity, a power of two >= 8 (default 0 = the page size)
 *   remote_keys      shared|private: what an rkey reaches (default shared; see below)
 *   monitor          none|symbols|patch|uffd|jemalloc|auto, or a '+'-joined list (default auto:
 *                    patch, else symbols, plus jemalloc when it is the allocator; auto+uffd
 *                    adds userfaultfd, the only monitor that sees an inline syscall instruction)
 *   odp              off|explicit|implicit|auto (default off)
 *   odp_prefetch_bytes  prefetch ODP ranges at least this large (default 0 = never)
 *   sim_base_ns, sim_page_ns   sim registrar cost model (defaults match io_uring)
 *   sim_mlock        0|1: sim registrar pins pages with mlock (default 0)
 *   sim_odp_page_ns  sim registrar ODP first-touch cost per page
 *   pool_max_bytes, pool_chunk_bytes, pool_hugepages   pool allocator (mrc_pool_*)
 *   uring_slots      uring registrar's fixed-buffer table size (default 16384)
 */
typedef struct mrc_config mrc_config_t;
int mrc_config_create(mrc_config_t **cfg); /* defaults, then MRCACHE_* environment */
int mrc_config_set(mrc_config_t *cfg, const char *key, const char *value); /* EINVAL: unknown key or bad value */
/* Copies the value of `key` (NUL-terminated) into buf; ENOENT unknown key, ERANGE too small. */
int mrc_config_get(const mrc_config_t *cfg, const char *key, char *buf, size_t buflen);
void mrc_config_destroy(mrc_config_t *cfg);

/* ---- cache ------------------------------------------------------------- */
typedef struct mrc_cache mrc_cache_t;
typedef struct mrc_region mrc_region_t;
typedef struct {
  void *addr;      /* start of the registered range (may be wider than requested) */
  size_t length;   /* its length */
  uint32_t lkey;
  uint32_t rkey;
  int access;      /* the access flags it was registered with */
} mrc_region_info_t;

int mrc_cache_create(const mrc_config_t *cfg /* NULL = defaults+env */, struct ibv_pd *pd /* verbs only */,
                     mrc_cache_t **cache);
/* Deregisters everything it registered. Regions still held are released too,
 * with a warning on stderr naming how many. */
void mrc_cache_destroy(mrc_cache_t *cache);
int mrc_get(mrc_cache_t *cache, void *addr, size_t length, int access /* IBV_ACCESS_* bits */,
            mrc_region_t **region);
int mrc_put(mrc_cache_t *cache, mrc_region_t *region);
void mrc_region_info(const mrc_region_t *region, mrc_region_info_t *info); /* the registered range and its keys */
int mrc_invalidate(mrc_cache_t *cache, void *addr, size_t length);
int mrc_flush(mrc_cache_t *cache); /* deregister every unused region */
/* Writes through the registration as a device would (uring: a fixed-buffer read
 * from a memfd); ENOTSUP where the registrar cannot; EINVAL if out of range. */
int mrc_region_device_write(mrc_cache_t *cache, mrc_region_t *region, size_t offset, const void *src,
                            size_t length);

/* Runtimes plug in their own registration (e.g. one region on several NICs), as
 * with ucs_rcache's ops. Called without any cache lock held; may allocate;
 * returns 0 or an errno value. */
typedef struct {
  int (*reg)(void *ctx, void *addr, size_t length, int access, uint64_t *handle, uint32_t *lkey,
             uint32_t *rkey);
  int (*dereg)(void *ctx, uint64_t handle);
} mrc_registrar_ops_t;
int mrc_cache_create_custom(const mrc_config_t *cfg, const mrc_registrar_ops_t *ops, void *ctx,
                            mrc_cache_t **cache);
uint64_t mrc_region_handle(const mrc_region_t *region); /* the handle the registrar returned */

/* Counters of one cache. Fields are only ever appended, never reordered: an
 * application built against an older mrcache.h passes the size of its smaller
 * struct (see mrc_stats) and the library writes only that many bytes. */
typedef struct {
  uint64_t hits, misses, registrations, deregistrations, evictions, invalidations, merges, regions,
      pinned_bytes, registrar_ns;
  uint64_t peak_pinned_bytes, registrar_failures, bypassed;
  uint64_t remote_private; /* requests with remote rights registered privately (remote_keys=private) */
  uint64_t monitor_incomplete; /* 1: the monitor reports less than `auto` promises (cause logged at creation) */
  uint64_t pin_budget_bytes; /* bytes this cache may pin now, shared with the process's other
                                caches (see "Pinned-memory budget"); 0 = no limit */
  /* Registered ranges the monitor could not watch (monitor uffd; never silent):
   * watch_failures is the sum of the causes that follow. */
  uint64_t watch_failures;
  uint64_t watch_enomem;    /* part of the range unmapped, or the kernel out of memory */
  uint64_t watch_ebusy;     /* the application watches that memory with its own userfaultfd */
  uint64_t watch_eperm;     /* the kernel refused */
  uint64_t watch_einval;    /* memory userfaultfd cannot track (most file mappings, SysV shm) */
  uint64_t watch_map_limit; /* not watched, to keep the map count below 3/4 of vm.max_map_count */
  uint64_t watch_other;     /* any other cause (ECHILD: a cache inherited by a fork child) */
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
 * destroyed) when its registration is released, never from inside a memory
 * hook and never with a cache lock held. NULL removes the callback. */
typedef void (*mrc_retire_cb_t)(void *arg, void *addr, size_t length, uint64_t handle);
int mrc_set_retire_callback(mrc_cache_t *cache, mrc_retire_cb_t fn, void *arg);

/* ---- pool of pre-registered buffers -------------------------------------- */
typedef struct mrc_pool mrc_pool_t;
int mrc_pool_create(mrc_cache_t *cache, const mrc_config_t *cfg /* NULL = defaults+env */, mrc_pool_t **pool);
void *mrc_pool_alloc(mrc_pool_t *pool, size_t size, mrc_region_info_t *keys); /* NULL and errno set on failure; keys cover [ptr, ptr+size) */
int mrc_pool_keys(mrc_pool_t *pool, const void *ptr, mrc_region_info_t *keys); /* EINVAL if ptr is not from this pool */
void mrc_pool_free(mrc_pool_t *pool, void *ptr);
void mrc_pool_destroy(mrc_pool_t *pool); /* deregisters its chunks; buffers still allocated are reported */

#ifdef __cplusplus
}
#endif

#endif /* MRCACHE_MRCACHE_H_ */
