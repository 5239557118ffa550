/* failed_requests.c: one good 16 MiB registration (less where RLIMIT_MEMLOCK
 * is lower: half the limit), then 2,000 that fail with
 * EFAULT (memory the device cannot pin), as an application that keeps
 * retrying a bad buffer does. Prints "good: mr" and "failed: N EFAULT" (N
 * registrations returned NULL with errno EFAULT). failed_requests_test.sh
 * runs it plain and under the shim and compares what each figure says.
 * Exit 2 without a device. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

enum { kGoodBytes = 16 << 20, kFailing = 2000, kBadBytes = 64 << 10 };

int main(void) {
  struct ibv_device **devs = ibv_get_device_list(NULL);
  struct ibv_context *ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
  struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  if (pd == NULL) {
    fprintf(stderr, "failed_requests: no device\n");
    return 2;
  }
  size_t good_bytes = kGoodBytes;
  struct rlimit memlock;
  if (getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY &&
      memlock.rlim_cur < 2 * (rlim_t)kGoodBytes)
    good_bytes = memlock.rlim_cur / 2;
  char *good = malloc(good_bytes);
  memset(good, 1, good_bytes);
  struct ibv_mr *mr = ibv_reg_mr(pd, good, good_bytes, IBV_ACCESS_LOCAL_WRITE);
  printf("good: %s\n", mr != NULL ? "mr" : "NULL");
  /* A PROT_NONE reservation: nothing else can be mapped there meanwhile. */
  void *bad = mmap(NULL, kBadBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int efault = 0;
  for (int i = 0; i < kFailing; ++i) {
    errno = 0;
    struct ibv_mr *m = ibv_reg_mr(pd, bad, kBadBytes, IBV_ACCESS_LOCAL_WRITE);
    if (m == NULL && errno == EFAULT) ++efault;
    if (m != NULL) ibv_dereg_mr(m);
  }
  printf("failed: %d EFAULT\n", efault);
  if (mr != NULL) ibv_dereg_mr(mr);
  munmap(bad, kBadBytes);
  free(good);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(devs);
  return 0;
}
