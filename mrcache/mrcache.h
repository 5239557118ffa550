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
 *   max_bytes        pinned bytes kept (default 0 = unlimited; suffixes K M G accepted)
 *   max_merge_bytes  largest region a merge may create (default 1G; 0 = merging off)
 *   bridge_bytes     block within which a miss in stable memory registers the resident rest
 *                    of its mapping once another region is there (default 128M; 0 = off;
 *                    needs monitor patch or uffd, or odp explicit)
 *   alignment        region granularity, a power of two >= 8 (default 0 = the page size)
 *   remote_keys      shared|private: what an rkey reaches (default shared; see below)
 *   monitor          none|symbols|patch|uffd|jemalloc|auto (default auto)
 *   odp              off|explicit|implicit|auto (default off)
 *   odp_prefetch_bytes  prefetch ODP ranges at least this large (default 0 = never)
 *   sim_base_ns, sim_page_ns   sim registrar cost model (defaults match io_uring)
 *   sim_mlock        0|1: sim registrar pins pages with mlock (default 0)
 *   sim_odp_page_ns  sim registrar ODP first-touch cost per page
 *   pool_max_bytes, pool_chunk_bytes, pool_hugepages   pool allocator (mrc_pool_*)
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

typedef struct {
  uint64_t hits, misses, registrations, deregistrations, evictions, invalidations, merges, regions,
      pinned_bytes, registrar_ns;
  /* added after the first release (add fields only at the end) */
  uint64_t peak_pinned_bytes, registrar_failures, bypassed;
  uint64_t remote_private; /* requests with remote rights registered privately (remote_keys=private) */
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
void mrc_stats(const mrc_cache_t *cache, mrc_stats_t *stats);
const char *mrc_strerror(int err);

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
