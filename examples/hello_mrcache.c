/* hello_mrcache.c: register a buffer through the cache twice: a miss, then a hit. */
#include <infiniband/verbs.h> /* IBV_ACCESS_* */
#include <mrcache/mrcache.h>
#include <stdio.h>
#include <stdlib.h>

static int failed(int err, const char *what) {
  if (err) fprintf(stderr, "%s: %s\n", what, mrc_strerror(err));
  return err;
}

int main(void) {
  size_t len = 1 << 20;
  char *buf = malloc(len);
  mrc_config_t *cfg = NULL;
  mrc_cache_t *cache = NULL;
  mrc_stats_t stats;
  int status = 1;
  if (buf == NULL) return 1;
  if (failed(mrc_config_create(&cfg), "mrc_config_create") ||
      /* "uring" needs no RDMA device; with one, use "verbs" and pass your ibv_pd. */
      failed(mrc_config_set(cfg, "registrar", "uring"), "mrc_config_set") ||
      failed(mrc_cache_create(cfg, NULL, &cache), "mrc_cache_create"))
    goto out;
  for (int i = 0; i < 2; i++) {
    mrc_region_t *region;
    mrc_region_info_t info;
    if (failed(mrc_get(cache, buf, len, IBV_ACCESS_LOCAL_WRITE, &region), "mrc_get")) goto out;
    mrc_region_info(region, &info); /* info.lkey, info.rkey cover [buf, buf + len) */
    /* ... post work requests with info.lkey ... */
    if (failed(mrc_put(cache, region), "mrc_put")) goto out;
  }
  if (failed(mrc_stats(cache, &stats), "mrc_stats")) goto out;
  printf("hits=%llu misses=%llu\n", (unsigned long long)stats.hits,
         (unsigned long long)stats.misses);
  status = 0;
out:
  mrc_cache_destroy(cache); /* deregisters everything; NULL is ignored */
  mrc_config_destroy(cfg);
  free(buf);
  return status;
}
