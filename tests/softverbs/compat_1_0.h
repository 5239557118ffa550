// compat_1_0.h: the structs of libibverbs 1.0's ABI (IBVERBS_1.0 symbols).
//
// Binaries linked against libibverbs 1.0 (2006) bind to the IBVERBS_1.0
// variants of the device, PD and MR verbs, which hand out these structs; each
// wraps the 1.1 object it stands for (real_*). softverbs provides that ABI for
// the verbs a registration-only program needs, laid out like rdma-core's
// compat layer: the fields such a program reads (device, context, pd,
// handle, lkey, rkey) sit where libibverbs 1.0 put them.
#ifndef SOFTVERBS_COMPAT_1_0_H_
#define SOFTVERBS_COMPAT_1_0_H_

#include <infiniband/verbs.h>

extern "C" {

struct ibv_device_1_0 {
  void* obsolete_sysfs_dev;
  void* obsolete_sysfs_ibdev;
  ibv_device* real_device;
  _ibv_device_ops _ops;
};

// libibverbs 1.0's ops table: 27 entry points used by its inline data-path
// verbs. softverbs has no data path, so all are null.
struct ibv_context_ops_1_0 {
  void* entry[27];
};

struct ibv_context_1_0 {
  ibv_device_1_0* device;
  ibv_context_ops_1_0 ops;
  int cmd_fd;
  int async_fd;
  int num_comp_vectors;
  ibv_context* real_context;
};

struct ibv_pd_1_0 {
  ibv_context_1_0* context;
  uint32_t handle;
  ibv_pd* real_pd;
};

struct ibv_mr_1_0 {
  ibv_context_1_0* context;
  ibv_pd_1_0* pd;
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
  ibv_mr* real_mr;
};

}  // extern "C"

#endif  // SOFTVERBS_COMPAT_1_0_H_
