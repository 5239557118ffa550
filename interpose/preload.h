/* preload.h: what libmrcache_preload.so exports besides libibverbs' names.
 *
 * The shim interposes ibv_reg_mr, ibv_reg_mr_iova, ibv_reg_mr_iova2,
 * ibv_reg_dmabuf_mr, ibv_dereg_mr, ibv_rereg_mr, ibv_alloc_pd, ibv_dealloc_pd
 * and ibv_close_device (see shim.h). Programs and tests that want to look inside
 * resolve mrcache_preload_get_stats with dlsym(RTLD_DEFAULT, ...): it is null
 * when the shim is not loaded.
 */
#ifndef INTERPOSE_PRELOAD_H_
#define INTERPOSE_PRELOAD_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mrcache_preload_stats {
  uint64_t calls;         /* application ibv_reg_mr* calls (dmabuf included) */
  uint64_t cache_lookups; /* of those, served by a PD cache */
  uint64_t hits;          /* cache hits */
  uint64_t misses;        /* cache misses */
  uint64_t bypassed;      /* registered directly by rule (MW_BIND, ZERO_BASED, iova, dmabuf) */
  uint64_t fallbacks;     /* registered directly after a cache error */
  uint64_t cache_registrations; /* registrations the caches made */
  uint64_t live_aliases;        /* aliases handed out and not deregistered */
  uint64_t enabled;             /* 1 if the shim caches, 0 if it passes everything through */
  uint64_t
      remote_private; /* requests with remote rights registered privately (remote_keys=private) */
  uint64_t watch_failures; /* registered ranges the monitor could not watch (mrc_stats_t) */
};

/* A snapshot of the process's shim counters (all zero before the first call). */
void mrcache_preload_get_stats(struct mrcache_preload_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* INTERPOSE_PRELOAD_H_ */
