// provider_private.cc: the IBVERBS_PRIVATE_34 entry points through which
// rdma-core's providers (libmlx5, libefa, ...) drive the kernel.
//
// Providers are linked by runtimes (UCX's libuct_ib, perftest) for their
// direct-verbs extensions, so they must load; their constructors register
// themselves with verbs_register_driver_34, which softverbs accepts and
// ignores: softverbs' one device is its own, and no provider ever gets a
// context. The kernel commands (ibv_cmd_*, execute_ioctl) and the context
// constructors therefore never run for a device here; called anyway, each
// fails with ENOSYS (a pointer result is NULL with errno ENOSYS) and touches
// nothing. Arguments are ignored, so the definitions omit them (the callers'
// argument registers are simply unused, which the x86-64 ABI allows).
#include <infiniband/verbs.h>

#include <cerrno>

extern "C" {

// rdma-core lets a provider destroy objects of a disassociated device; there
// is no such device here, the flag only has to exist.
bool verbs_allow_disassociate_destroy = false;

void verbs_register_driver_34(void) {}

// The pre-34 provider registration: accepted and ignored as well.
void softverbs_ibv_register_driver_1_1(void) {}
__asm__(".symver softverbs_ibv_register_driver_1_1, ibv_register_driver@IBVERBS_1.1");

void* _verbs_init_and_alloc_context(void) {
  errno = ENOSYS;
  return nullptr;
}

ibv_context* verbs_open_device(void) {
  errno = ENOSYS;
  return nullptr;
}

void verbs_set_ops(void) {}
void verbs_uninit_context(void) {}
void __verbs_log(void) {}

// A provider's CQ constructor helper: fills the common fields of a CQ.
void verbs_init_cq(ibv_cq* cq, ibv_context* context, ibv_comp_channel* channel, void* cq_context) {
  if (cq == nullptr) return;
  cq->context = context;
  cq->channel = channel;
  cq->cq_context = cq_context;
  cq->comp_events_completed = 0;
  cq->async_events_completed = 0;
  pthread_mutex_init(&cq->mutex, nullptr);
  pthread_cond_init(&cq->cond, nullptr);
}

// The attribute count of an ioctl command buffer chain; no command is ever
// executed, so only the caller's own count is returned.
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs) { return num_attrs; }

int execute_ioctl(void) { return ENOSYS; }

// Reads a file of a provider's sysfs device: softverbs has none.
int ibv_read_ibdev_sysfs_file(void) {
  errno = ENOSYS;
  return -1;
}

#define SOFTVERBS_NO_KERNEL_COMMAND(name) \
  int name(void) { return ENOSYS; }

SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_advise_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_alloc_dm)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_alloc_mw)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_alloc_pd)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_attach_mcast)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_close_xrcd)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_ah)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_counters)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_cq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_cq_ex)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_flow)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_flow_action_esp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_qp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_qp_ex)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_qp_ex2)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_rwq_ind_table)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_srq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_srq_ex)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_create_wq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_dealloc_mw)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_dealloc_pd)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_dereg_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_ah)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_counters)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_cq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_flow)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_flow_action)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_qp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_rwq_ind_table)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_srq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_destroy_wq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_detach_mcast)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_free_dm)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_get_context)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_modify_cq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_modify_flow_action_esp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_modify_qp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_modify_qp_ex)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_modify_srq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_modify_wq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_open_qp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_open_xrcd)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_poll_cq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_post_recv)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_post_send)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_post_srq_recv)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_query_context)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_query_device_any)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_query_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_query_port)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_query_qp)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_query_srq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_read_counters)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_reg_dm_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_reg_dmabuf_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_reg_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_req_notify_cq)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_rereg_mr)
SOFTVERBS_NO_KERNEL_COMMAND(ibv_cmd_resize_cq)

}  // extern "C"
