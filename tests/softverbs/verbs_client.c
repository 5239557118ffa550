/* verbs_client.c: an ordinary rdma-core program in C, built against the real
 * headers and linked with -libverbs. Its test runs it with softverbs on
 * LD_LIBRARY_PATH. It registers two buffers (one through the inline
 * ibv_reg_mr with constant flags -> ibv_reg_mr@@IBVERBS_1.1, one with runtime
 * flags -> ibv_reg_mr_iova2@@IBVERBS_1.8), deregisters them and prints what
 * it saw. Exit status 0 only if every verb succeeded. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  int access = argc > 1 ? atoi(argv[1]) : IBV_ACCESS_LOCAL_WRITE;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n < 1) {
    perror("ibv_get_device_list");
    return 1;
  }
  printf("device: %s\n", ibv_get_device_name(list[0]));
  struct ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == NULL) {
    perror("ibv_open_device");
    return 1;
  }
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == NULL) {
    perror("ibv_alloc_pd");
    return 1;
  }
  size_t len = 1 << 20;
  char* a = malloc(len);
  char* b = malloc(len);
  if (a == NULL || b == NULL) return 1;
  struct ibv_mr* mr_a = ibv_reg_mr(pd, a, len, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* mr_b = ibv_reg_mr(pd, b, len, access);
  if (mr_a == NULL || mr_b == NULL) {
    perror("ibv_reg_mr");
    return 1;
  }
  printf("registered: lkey %u and lkey %u\n", mr_a->lkey, mr_b->lkey);
  if (ibv_dereg_mr(mr_a) != 0 || ibv_dereg_mr(mr_b) != 0) return 1;
  if (ibv_dealloc_pd(pd) != 0 || ibv_close_device(ctx) != 0) return 1;
  ibv_free_device_list(list);
  free(a);
  free(b);
  printf("done\n");
  return 0;
}
