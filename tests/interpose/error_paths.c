/* error_paths.c: every error path of the interposed verbs, as an application
 * sees it. Plain C against rdma-core's headers; each check prints one line
 * "name: result" (return value or NULL, errno name on failure, and whether
 * the MR still works where the man page says it must). error_paths_test.sh
 * runs it without and with libmrcache_preload.so and requires identical
 * output: the shim must fail exactly as libibverbs does.
 * Needs softverbs (device writes); exit 2 without it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*device_write_fn)(uint32_t, uint64_t, const void *, size_t);
static device_write_fn device_write;
static size_t page;

static const char *errname(int e) {
  switch (e) {
    case 0:
      return "0";
    case EINVAL:
      return "EINVAL";
    case EFAULT:
      return "EFAULT";
    case EBUSY:
      return "EBUSY";
    case ENOMEM:
      return "ENOMEM";
    case EOPNOTSUPP:
      return "EOPNOTSUPP";
    case EACCES:
      return "EACCES";
    case ERANGE:
      return "ERANGE";
    case ENOSYS:
      return "ENOSYS";
    default:
      return strerror(e);
  }
}

/* Registration: "mr" or "NULL errno=X". */
static void show_mr(const char *name, struct ibv_mr *mr, int err) {
  if (mr != NULL)
    printf("%s: mr\n", name);
  else
    printf("%s: NULL errno=%s\n", name, errname(err));
}

/* An errno-valued return (ibv_dereg_mr, ibv_dealloc_pd, ibv_close_device). */
static void show_ret(const char *name, int ret) { printf("%s: %s\n", name, errname(ret)); }

/* ibv_rereg_mr: its return code and, on failure, errno. */
static void show_rereg(const char *name, int ret, int err) {
  if (ret == 0)
    printf("%s: 0\n", name);
  else
    printf("%s: %d errno=%s\n", name, ret, errname(err));
}

/* Does a device write through mr land at addr? */
static const char *works(struct ibv_mr *mr, void *addr) {
  unsigned char src[64];
  memset(src, 0x5a, sizeof src);
  memset(addr, 0, sizeof src);
  int ret = device_write(mr->lkey, (uint64_t)(uintptr_t)addr, src, sizeof src);
  if (ret != 0) return errname(ret);
  return memcmp(addr, src, sizeof src) == 0 ? "lands" : "STALE";
}

#define REG(name, call)         \
  do {                          \
    errno = 0;                  \
    struct ibv_mr *m_ = (call); \
    int e_ = errno;             \
    show_mr(name, m_, e_);      \
    if (m_) ibv_dereg_mr(m_);   \
  } while (0)

#define REREG(name, call)     \
  do {                        \
    errno = 0;                \
    int r_ = (call);          \
    int e_ = errno;           \
    show_rereg(name, r_, e_); \
  } while (0)

int main(void) {
  device_write = (device_write_fn)dlsym(RTLD_DEFAULT, "softverbs_device_write");
  if (device_write == NULL) {
    fprintf(stderr, "error_paths: needs softverbs\n");
    return 2;
  }
  page = (size_t)sysconf(_SC_PAGESIZE);
  struct ibv_device **devs = ibv_get_device_list(NULL);
  struct ibv_context *ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
  struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  if (pd == NULL) {
    fprintf(stderr, "error_paths: no device\n");
    return 2;
  }
  size_t len = 16 * page;
  unsigned char *buf = aligned_alloc(page, len);
  unsigned char *buf2 = aligned_alloc(page, len);
  memset(buf, 0, len);
  memset(buf2, 0, len);
  /* Memory the device cannot pin (EFAULT). A PROT_NONE reservation rather
   * than an unmapped hole: the hole could be reused by any allocation in
   * between, the shim's own included. */
  unsigned char *gone = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  volatile int optional_bit = 1 << 25, local_write = IBV_ACCESS_LOCAL_WRITE;

  /* ---- registration ---- */
  REG("reg_ok", ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_remote_write_without_local_write", ibv_reg_mr(pd, buf, len, IBV_ACCESS_REMOTE_WRITE));
  REG("reg_remote_atomic_without_local_write", ibv_reg_mr(pd, buf, len, IBV_ACCESS_REMOTE_ATOMIC));
  REG("reg_length_zero", ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_wrapping_range", ibv_reg_mr(pd, buf, SIZE_MAX - 10, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_inaccessible", ibv_reg_mr(pd, gone, len, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_partly_inaccessible",
      ibv_reg_mr(pd, buf + len - page, 2 * page, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_on_demand_without_odp",
      ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
  REG("reg_implicit_odp",
      ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
  REG("reg_null_pd", ibv_reg_mr(NULL, buf, len, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_unknown_access_bit", ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | (1 << 15)));
  REG("reg_optional_access_bit", ibv_reg_mr(pd, buf, len, local_write | optional_bit));
  REG("reg_iova2_remote_write_without_local_write",
      ibv_reg_mr_iova2(pd, buf, len, (uintptr_t)buf, IBV_ACCESS_REMOTE_WRITE));
  REG("reg_iova_equal_addr", ibv_reg_mr_iova(pd, buf, len, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_iova_congruent", ibv_reg_mr_iova(pd, buf, len, 0x100000, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_iova_not_congruent", ibv_reg_mr_iova(pd, buf, len, 0x100123, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_zero_based", ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED));
  REG("reg_mw_bind", ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
  REG("reg_dmabuf", ibv_reg_dmabuf_mr(pd, 0, len, 0, -1, IBV_ACCESS_LOCAL_WRITE));

  /* ---- deregistration ---- */
  struct ibv_mr fake;
  memset(&fake, 0, sizeof fake);
  fake.context = ctx;
  fake.pd = pd;
  show_ret("dereg_unknown_mr", ibv_dereg_mr(&fake));
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
  show_ret("dereg_ok", ibv_dereg_mr(mr));
  show_ret("dereg_twice", ibv_dereg_mr(mr)); /* softverbs checks its registry first */
  mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  show_ret("dereg_remote_ok", ibv_dereg_mr(mr));
  show_ret("dereg_remote_twice", ibv_dereg_mr(mr));

  /* ---- ibv_rereg_mr ---- */
  mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
  REREG("rereg_unknown_flags", ibv_rereg_mr(mr, 1 << 7, NULL, NULL, 0, 0));
  printf("rereg_unknown_flags_old_mr: %s\n", works(mr, buf));
  REREG("rereg_access_without_flag",
        ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, len, IBV_ACCESS_LOCAL_WRITE));
  REREG("rereg_translation_null_addr",
        ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, len, 0));
  REREG("rereg_translation_zero_length",
        ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, 0, 0));
  REREG("rereg_translation_inaccessible",
        ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, gone, len, 0));
  printf("rereg_translation_inaccessible_old_mr: %s addr_kept %d\n", works(mr, buf),
         mr->addr == buf);
  REREG("rereg_bad_access",
        ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE));
  printf("rereg_bad_access_old_mr: %s\n", works(mr, buf));
  struct ibv_pd fake_pd;
  memset(&fake_pd, 0, sizeof fake_pd);
  fake_pd.context = ctx;
  REREG("rereg_unknown_pd", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, &fake_pd, NULL, 0, 0));
  REG("reg_on_foreign_pd", ibv_reg_mr(&fake_pd, buf, len, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_remote_on_foreign_pd",
      ibv_reg_mr(&fake_pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  REREG("rereg_no_flags", ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0));
  REREG("rereg_translation_ok",
        ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2 + 100, len - 200, 0));
  printf("rereg_translation_ok_mr: addr_moved %d length %zu write %s\n", mr->addr == buf2 + 100,
         mr->length, works(mr, buf2 + 100));
  REREG("rereg_access_ok", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
  printf("rereg_access_ok_mr: %s\n", works(mr, buf2 + 100));
  struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
  REREG("rereg_pd_ok", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0));
  printf("rereg_pd_ok_mr: pd_moved %d\n", mr->pd == pd2);
  show_ret("dealloc_pd_holding_reregistered_mr", ibv_dealloc_pd(pd2));
  show_ret("dereg_reregistered_mr", ibv_dereg_mr(mr));
  show_ret("dealloc_pd2", ibv_dealloc_pd(pd2));

  /* ---- ibv_dealloc_pd ---- */
  mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mr_b = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
  show_ret("dealloc_pd_with_live_mrs", ibv_dealloc_pd(pd));
  printf("dealloc_pd_with_live_mrs_mr: %s\n", works(mr, buf));
  show_ret("dereg_first_of_two", ibv_dereg_mr(mr));
  show_ret("dealloc_pd_with_one_live_mr", ibv_dealloc_pd(pd));
  show_ret("dereg_second_of_two", ibv_dereg_mr(mr_b));
  show_ret("dealloc_pd_ok", ibv_dealloc_pd(pd));
  show_ret("dealloc_pd_twice", ibv_dealloc_pd(pd));
  REG("reg_on_deallocated_pd", ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE));
  REG("reg_remote_on_deallocated_pd",
      ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
  REG("reg_iova2_on_deallocated_pd",
      ibv_reg_mr_iova2(pd, buf, len, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE));

  /* ---- ibv_close_device with MRs left ---- */
  struct ibv_context *ctx2 = ibv_open_device(devs[0]);
  struct ibv_pd *pd3 = ibv_alloc_pd(ctx2);
  struct ibv_mr *left = ibv_reg_mr(pd3, buf, len, IBV_ACCESS_LOCAL_WRITE);
  show_mr("reg_before_close", left, errno);
  show_ret("close_device_with_live_mr", ibv_close_device(ctx2));
  show_ret("dereg_after_close", ibv_dereg_mr(left));
  REG("reg_on_pd_of_closed_device", ibv_reg_mr(pd3, buf, len, IBV_ACCESS_LOCAL_WRITE));
  show_ret("dealloc_pd_of_closed_device", ibv_dealloc_pd(pd3));

  show_ret("close_device", ibv_close_device(ctx));
  ibv_free_device_list(devs);
  free(buf);
  free(buf2);
  munmap(gone, len);
  return 0;
}
