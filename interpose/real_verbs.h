// real_verbs.h: the libibverbs functions the shim stands in front of.
//
// Each is resolved once with dlvsym(RTLD_NEXT, name, version), i.e. the next
// definition after the shim in the global scope (libibverbs, or softverbs in
// tests), at the version rdma-core v44 makes the default:
//   ibv_reg_mr, ibv_dereg_mr, ibv_rereg_mr, ibv_alloc_pd,
//   ibv_dealloc_pd, ibv_close_device              IBVERBS_1.1
//   ibv_reg_mr_iova                               IBVERBS_1.7
//   ibv_reg_mr_iova2                              IBVERBS_1.8
//   ibv_reg_dmabuf_mr                             IBVERBS_1.12
// (the IBVERBS_1.0 compat variants take 2006-era structures; the shim does
// not export them, so old binaries bound to them never reach the shim).
//
// A function the loaded library lacks stays null; the interposers then fail
// the way a missing provider op does (ENOSYS / EOPNOTSUPP).
#ifndef INTERPOSE_REAL_VERBS_H_
#define INTERPOSE_REAL_VERBS_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace mrcache_preload {

struct RealVerbs {
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int) = nullptr;
  ibv_mr* (*reg_mr_iova)(ibv_pd*, void*, size_t, uint64_t, int) = nullptr;
  ibv_mr* (*reg_mr_iova2)(ibv_pd*, void*, size_t, uint64_t, unsigned) = nullptr;
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  int (*rereg_mr)(ibv_mr*, int, ibv_pd*, void*, size_t, int) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
};

// Resolved on first use (thread-safe), never changes afterwards.
const RealVerbs& Real();

}  // namespace mrcache_preload

#endif  // INTERPOSE_REAL_VERBS_H_
