/* rails_app: a process with one rails cache over four softverbs devices
 * (SOFTVERBS_DEVICES=4) for rails_live_stats_test.sh to watch.
 *
 * It registers a known pattern: buffer 0 on every rail, then rail r alone
 * gets r more buffers of its own, so rail r holds r + 1 registrations; then
 * the last buffer of rail 3 is unmapped, its deregistration handed to the
 * background deregistration thread (async_dereg=on, async_dereg_bytes=0), and
 * waited for; the page after it, got on rail 3 to make that happen, is
 * invalidated (rail 3: 5 registrations, 2 deregistrations). It prints "ready" and keeps getting
 * buffer 0 (hits) until its stdin closes (or 60 s pass), then flushes and destroys the cache. Exit
 * status 0 only if every rail's registrations were all deregistered. */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mrcache/mrcache.h"

enum { kRails = 4, kBuffers = 1 + 1 + 2 + 3 };
static const int kAccess = IBV_ACCESS_LOCAL_WRITE;

static int Fail(const char *what, int err) {
  fprintf(stderr, "rails_app: %s: %s\n", what, strerror(err));
  return 1;
}

/* A get and put of `length` bytes at `addr` on the rails of `rails`. */
static int Use(mrc_cache_t *cache, char *addr, size_t length, uint64_t rails) {
  mrc_region_t *region = NULL;
  int err = mrc_get_rails(cache, addr, length, kAccess, rails, &region);
  if (err != 0) return err;
  return mrc_put(cache, region);
}

/* Waits (at most 10 s) until the background thread has done every
 * deregistration the cache handed it. */
static int WaitForQueue(mrc_cache_t *cache) {
  for (int i = 0; i < 10000; ++i) {
    mrc_stats_t s;
    if (mrc_stats(cache, &s) != 0) return EINVAL;
    if (s.dereg_queue_depth == 0 && s.background_dereg_ns > 0) return 0;
    usleep(1000);
  }
  return ETIMEDOUT;
}

/* True once stdin is closed (or at end of file). */
static int StdinClosed(void) {
  struct pollfd p = {0, POLLIN, 0};
  if (poll(&p, 1, 10) <= 0) return 0;
  char c;
  return read(0, &c, 1) <= 0;
}

int main(void) {
  int ndevices = 0;
  struct ibv_device **list = ibv_get_device_list(&ndevices);
  if (list == NULL || ndevices != kRails) {
    fprintf(stderr, "rails_app: %d devices, run with SOFTVERBS_DEVICES=%d\n", ndevices, kRails);
    return 1;
  }
  struct ibv_context *contexts[kRails];
  struct ibv_pd *pds[kRails];
  for (int r = 0; r < kRails; ++r) {
    contexts[r] = ibv_open_device(list[r]);
    pds[r] = contexts[r] != NULL ? ibv_alloc_pd(contexts[r]) : NULL;
    if (pds[r] == NULL) return Fail("ibv_open_device / ibv_alloc_pd", errno);
  }
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  /* Buffers one page each, a page apart: no two regions merge. */
  char *arena =
      mmap(NULL, 2 * kBuffers * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (arena == MAP_FAILED) return Fail("mmap", errno);
  memset(arena, 'a', 2 * kBuffers * page);

  mrc_config_t *cfg = NULL;
  mrc_cache_t *cache = NULL;
  int err = mrc_config_create(&cfg);
  if (err == 0) err = mrc_config_set(cfg, "bridge_bytes", "0");
  if (err == 0) err = mrc_config_set(cfg, "async_dereg", "on");
  if (err == 0) err = mrc_config_set(cfg, "async_dereg_bytes", "0");
  if (err == 0) err = mrc_cache_create_rails(cfg, pds, kRails, &cache);
  if (err != 0) return Fail("creating the rails cache", err);

  err = Use(cache, arena, page, (1u << kRails) - 1);
  int next = 1;
  for (int r = 1; r < kRails && err == 0; ++r) {
    for (int i = 0; i < r && err == 0; ++i, ++next) {
      err = Use(cache, arena + 2 * next * page, page, 1u << r);
    }
  }
  if (err != 0) return Fail("getting on the rails", err);
  /* Unmapped: the monitor reports it, and the next get that misses (of the
   * gap page after it, on rail 3) takes the region over the unmapped page out
   * of the index; its memory gone, the region goes to the background thread.
   * Then the gap page is invalidated, which deregisters its region itself
   * (mrc_invalidate hands nothing over). */
  char *last = arena + 2 * (next - 1) * page;
  err = munmap(last, page) == 0 ? 0 : errno;
  if (err == 0) err = Use(cache, last + page, page, 1u << 3);
  if (err == 0) err = WaitForQueue(cache);
  if (err == 0) err = mrc_invalidate(cache, last + page, page);
  if (err != 0) return Fail("the background deregistration", err);

  printf("ready\n");
  fflush(stdout);
  const time_t give_up = time(NULL) + 60;
  while (!StdinClosed() && time(NULL) < give_up) {
    err = Use(cache, arena, page, 1);
    if (err != 0) return Fail("a hit on rail 0", err);
  }

  int balanced = mrc_flush(cache) == 0;
  for (int r = 0; r < kRails; ++r) {
    mrc_rail_stats_t s;
    balanced =
        balanced && mrc_rail_stats(cache, r, &s) == 0 && s.registrations == s.deregistrations;
  }
  mrc_cache_destroy(cache);
  mrc_config_destroy(cfg);
  munmap(arena, 2 * kBuffers * page);
  for (int r = 0; r < kRails; ++r) {
    ibv_dealloc_pd(pds[r]);
    ibv_close_device(contexts[r]);
  }
  ibv_free_device_list(list);
  if (!balanced) fprintf(stderr, "rails_app: a rail's registrations outlived its cache\n");
  return balanced ? 0 : 1;
}
