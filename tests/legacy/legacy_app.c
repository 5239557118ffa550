/* legacy_app.c: a verbs application of the kind mrcache-run is for.
 *
 * Plain C against rdma-core's headers, no knowledge of mrcache. It registers
 * and deregisters a buffer around every "transfer", over a working set of
 * buffers, through every registration entry point an application can reach:
 *   - ibv_reg_mr with constant flags          (binds to ibv_reg_mr)
 *   - rdma_reg_msgs / rdma_dereg_mr           (librdmacm's inline wrappers)
 *   - ibv_reg_mr with run-time flags          (the inline wrapper calls ibv_reg_mr_iova2)
 *   - ibv_reg_mr_iova with iova == addr       (binds to ibv_reg_mr_iova)
 * After each registration the "device" writes through the MR's lkey
 * (softverbs_device_write, looked up with dlsym so this builds and links
 * against the real libibverbs) and the program checks that the CPU sees the
 * data at that address: a stale registration writes into pages the program
 * no longer has, and is counted.
 *
 * Between rounds every buffer is freed and allocated again. The mmap
 * threshold is pinned at 128 KiB (glibc otherwise raises it after the first
 * free of an mmapped chunk), so the large buffers come from mmap, go back
 * through glibc's internal munmap on free, and are usually mapped again at
 * the same addresses in the next round.
 *
 * stdout depends only on the arguments (no addresses, keys or times), so runs
 * with and without the shim must print the same. The wall time and the
 * process CPU time (all threads) of the transfer loop go to stderr.
 *
 * Usage: legacy_app [ROUNDS [TRANSFERS_PER_ROUND [BUFFERS]]]  (defaults 10 400 8)
 * Exit status: 0 all transfers verified, 1 a registration failed or a device
 * write was lost, 2 bad usage or no device.
 */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <malloc.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*device_write_fn)(uint32_t lkey, uint64_t addr, const void *src, size_t len);

enum { kMaxBuffers = 64, kChunk = 4096 };

/* Buffer sizes: page multiples and odd sizes, heap (< 128 KiB) and mmap. */
static const size_t kSizes[] = {256 << 10, 1 << 20,  16 << 10,  512 << 10,
                                2 << 20,   96 << 10, 768 << 10, 300000};

static int parse_count(const char *text, long *out) {
  char *end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0 || v > 100000000) return -1;
  *out = v;
  return 0;
}

static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
  long rounds = 10, transfers = 400, nbuf = 8;
  if (argc > 4 || (argc > 1 && parse_count(argv[1], &rounds) != 0) ||
      (argc > 2 && parse_count(argv[2], &transfers) != 0) ||
      (argc > 3 && (parse_count(argv[3], &nbuf) != 0 || nbuf > kMaxBuffers))) {
    fprintf(stderr, "usage: %s [ROUNDS [TRANSFERS_PER_ROUND [BUFFERS<=%d]]]\n", argv[0],
            kMaxBuffers);
    return 2;
  }
  device_write_fn device_write = (device_write_fn)dlsym(RTLD_DEFAULT, "softverbs_device_write");
  if (device_write == NULL) {
    fprintf(stderr, "legacy_app: needs softverbs (softverbs_device_write not found)\n");
    return 2;
  }
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);

  int ndev = 0;
  struct ibv_device **devs = ibv_get_device_list(&ndev);
  if (devs == NULL || ndev == 0) {
    fprintf(stderr, "legacy_app: no RDMA device\n");
    return 2;
  }
  struct ibv_context *ctx = ibv_open_device(devs[0]);
  struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  if (pd == NULL) {
    fprintf(stderr, "legacy_app: cannot open the device or allocate a PD\n");
    return 2;
  }
  /* rdma_reg_msgs only reads id->pd. */
  struct rdma_cm_id id;
  memset(&id, 0, sizeof id);
  id.verbs = ctx;
  id.pd = pd;

  volatile int runtime_flags = IBV_ACCESS_LOCAL_WRITE; /* not a compile-time constant */
  unsigned char src[kChunk];
  void *bufs[kMaxBuffers];
  size_t sizes[kMaxBuffers];
  long failures = 0, stale = 0, verified = 0;
  uint64_t total_checksum = 0;
  uint64_t t0 = clock_ns(CLOCK_MONOTONIC), cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);

  for (long r = 0; r < rounds; ++r) {
    for (long i = 0; i < nbuf; ++i) {
      /* Sizes rotate between rounds so freed ranges are reused by others. */
      sizes[i] = kSizes[(size_t)(i + r) % (sizeof kSizes / sizeof kSizes[0])];
      bufs[i] = malloc(sizes[i]);
      if (bufs[i] == NULL) {
        fprintf(stderr, "legacy_app: out of memory\n");
        return 2;
      }
      memset(bufs[i], 0, sizes[i]);
    }
    long round_stale = 0, round_verified = 0;
    uint64_t checksum = 0;
    for (long t = 0; t < transfers; ++t) {
      long i = (t * 7 + r) % nbuf;
      unsigned char *buf = bufs[i];
      size_t size = sizes[i];
      size_t len = size < kChunk ? size : kChunk;
      size_t off = ((size_t)t * 4099u) % (size - len + 1);
      int mode = (int)(t % 4);
      struct ibv_mr *mr = NULL;
      switch (mode) {
        case 0:
          mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
          break;
        case 1:
          mr = rdma_reg_msgs(&id, buf, size);
          break;
        case 2:
          mr = ibv_reg_mr(pd, buf, size, runtime_flags);
          break;
        default:
          mr = ibv_reg_mr_iova(pd, buf, size, (uintptr_t)buf,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
          break;
      }
      if (mr == NULL || mr->addr != (void *)buf || mr->length != size || mr->pd != pd) {
        fprintf(stderr, "legacy_app: round %ld transfer %ld: registration failed or wrong MR\n", r,
                t);
        ++failures;
        if (mr != NULL) ibv_dereg_mr(mr);
        continue;
      }
      for (size_t k = 0; k < len; ++k) src[k] = (unsigned char)(r * 131 + t * 31 + k * 7 + 1);
      int err = device_write(mr->lkey, (uint64_t)(uintptr_t)(buf + off), src, len);
      if (err != 0) {
        fprintf(stderr, "legacy_app: round %ld transfer %ld: device write failed: %s\n", r, t,
                strerror(err));
        ++failures;
      } else if (memcmp(buf + off, src, len) != 0) {
        ++round_stale; /* the write went to pages this buffer no longer has */
      } else {
        ++round_verified;
        for (size_t k = 0; k < len; k += 61) checksum = checksum * 1099511628211u + buf[off + k];
      }
      int ret = mode == 1 ? rdma_dereg_mr(mr) : ibv_dereg_mr(mr);
      if (ret != 0) {
        fprintf(stderr, "legacy_app: round %ld transfer %ld: deregistration failed\n", r, t);
        ++failures;
      }
    }
    printf("round %ld: transfers %ld verified %ld stale %ld checksum %016llx\n", r, transfers,
           round_verified, round_stale, (unsigned long long)checksum);
    stale += round_stale;
    verified += round_verified;
    total_checksum ^= checksum + (uint64_t)r;
    for (long i = 0; i < nbuf; ++i) free(bufs[i]);
  }
  uint64_t elapsed = clock_ns(CLOCK_MONOTONIC) - t0;
  uint64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0; /* every thread of the process */

  int dealloc = ibv_dealloc_pd(pd);
  int closed = ibv_close_device(ctx);
  ibv_free_device_list(devs);
  printf(
      "total: rounds %ld transfers %ld verified %ld stale %ld failures %ld checksum %016llx "
      "dealloc_pd %d close_device %d\n",
      rounds, rounds * transfers, verified, stale, failures, (unsigned long long)total_checksum,
      dealloc, closed);
  fprintf(stderr, "legacy_app: wall_ns=%llu cpu_ns=%llu\n", (unsigned long long)elapsed,
          (unsigned long long)cpu);
  return (stale == 0 && failures == 0 && dealloc == 0 && closed == 0) ? 0 : 1;
}
