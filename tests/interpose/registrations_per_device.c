/* registrations_per_device.c: on each device ibv_get_device_list lists
 * (device d, counted from 0), one PD and d + 1 buffers of 64 KiB, each
 * registered and deregistered three times, so that under the shim device d's
 * cache registers d + 1 times and finds d + 1 misses and 2 * (d + 1) hits.
 * Buffers are 64 KiB apart inside one mapping per device (never adjacent:
 * the cache merges nothing). The PDs are deallocated before exit, so each
 * device's registrations are all deregistered. Prints one line per device,
 * "NAME: buffers B, registrations R" (R: the ibv_reg_mr calls that
 * succeeded). stats_per_device_test.sh checks the shim's MRCACHE_STATS
 * against it. Exit 2 without a device, 1 on any failed call. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

enum { kBufferBytes = 64 << 10, kRounds = 3 };

/* Registers device `index`'s buffers on `pd`; returns the registrations that
 * succeeded, or -1 after printing the failure. */
static int RegisterBuffers(struct ibv_pd *pd, int index, const char *name) {
  const int buffers = index + 1;
  const size_t bytes = (size_t)2 * buffers * kBufferBytes;
  char *mapping = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    perror("mmap");
    return -1;
  }
  memset(mapping, 1, bytes);
  int registered = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int b = 0; b < buffers; ++b) {
      struct ibv_mr *mr = ibv_reg_mr(pd, mapping + 2 * (size_t)b * kBufferBytes, kBufferBytes,
                                     IBV_ACCESS_LOCAL_WRITE);
      if (mr == NULL) {
        fprintf(stderr, "%s: ibv_reg_mr of buffer %d failed: %m\n", name, b);
        munmap(mapping, bytes);
        return -1;
      }
      ++registered;
      if (ibv_dereg_mr(mr) != 0) {
        fprintf(stderr, "%s: ibv_dereg_mr of buffer %d failed\n", name, b);
        munmap(mapping, bytes);
        return -1;
      }
    }
  }
  munmap(mapping, bytes);
  return registered;
}

int main(void) {
  int count = 0;
  struct ibv_device **devs = ibv_get_device_list(&count);
  if (devs == NULL || count == 0) {
    fprintf(stderr, "registrations_per_device: no device\n");
    return 2;
  }
  int status = 0;
  for (int d = 0; d < count && status == 0; ++d) {
    const char *name = ibv_get_device_name(devs[d]);
    struct ibv_context *ctx = ibv_open_device(devs[d]);
    struct ibv_pd *pd = ctx != NULL ? ibv_alloc_pd(ctx) : NULL;
    const int registered = pd != NULL ? RegisterBuffers(pd, d, name) : -1;
    if (registered < 0) {
      status = 1;
    } else {
      printf("%s: buffers %d, registrations %d\n", name, d + 1, registered);
    }
    if (pd != NULL && ibv_dealloc_pd(pd) != 0) status = 1;
    if (ctx != NULL && ibv_close_device(ctx) != 0) status = 1;
  }
  ibv_free_device_list(devs);
  return status;
}
