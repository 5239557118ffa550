/* tiny_runtime.c: what an autotools runtime does with an installed mrcache:
 * includes <mrcache/mrcache.h>, links -lmrcache via pkg-config, caches one
 * registration through its own callbacks and checks hit/miss accounting. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <mrcache/mrcache.h>

static int regs, deregs;

static int my_reg(void *ctx, void *addr, size_t len, int access, uint64_t *handle, uint32_t *lkey,
                  uint32_t *rkey) {
  (void)ctx;
  (void)addr;
  (void)len;
  (void)access;
  *handle = (uint64_t)++regs;
  *lkey = *rkey = 42;
  return 0;
}

static int my_dereg(void *ctx, uint64_t handle) {
  (void)ctx;
  (void)handle;
  deregs++;
  return 0;
}

int main(void) {
  static char buf[1 << 16];
  mrc_config_t *cfg;
  mrc_cache_t *cache;
  mrc_region_t *r;
  mrc_stats_t st;
  mrc_registrar_ops_t ops = {my_reg, my_dereg};
  if (mrc_config_create(&cfg) || mrc_config_set(cfg, "monitor", "none")) return 1;
  if (mrc_config_set(cfg, "no_such_key", "1") != EINVAL) return 2;
  if (mrc_cache_create_custom(cfg, &ops, NULL, &cache)) return 3;
  for (int i = 0; i < 10; i++) {
    if (mrc_get(cache, buf + 100, 1000, 1, &r)) return 4;
    if (mrc_put(cache, r)) return 5;
  }
  mrc_stats(cache, &st);
  mrc_cache_destroy(cache);
  mrc_config_destroy(cfg);
  printf("hits=%llu misses=%llu registrations=%d deregistrations=%d\n", (unsigned long long)st.hits,
         (unsigned long long)st.misses, regs, deregs);
  return (st.hits == 9 && st.misses == 1 && regs == 1 && deregs == 1) ? 0 : 6;
}
