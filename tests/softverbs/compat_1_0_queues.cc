// compat_1_0_queues.cc: the IBVERBS_1.0 variants of the queue, address
// handle, multicast and event verbs.
//
// softverbs does not model libibverbs 1.0's queue objects (compat_1_0.cc
// covers the device, PD and MR verbs): creating one fails with ENOSYS, so no
// 1.0 CQ, QP, SRQ or AH ever exists, and every verb handed one answers as for
// an unknown object, EINVAL (an int verb) or nothing (a void verb).
#include <cerrno>

#define SOFTVERBS_COMPAT_QUEUE_1_0(name) \
  __asm__(".symver softverbs_" #name "_1_0, " #name "@IBVERBS_1.0")

// Creation: NULL with errno ENOSYS.
#define SOFTVERBS_COMPAT_CREATE(name)  \
  SOFTVERBS_COMPAT_QUEUE_1_0(name);    \
  void* softverbs_##name##_1_0(void) { \
    errno = ENOSYS;                    \
    return nullptr;                    \
  }

// A verb on an object that cannot exist: EINVAL.
#define SOFTVERBS_COMPAT_UNKNOWN(name) \
  SOFTVERBS_COMPAT_QUEUE_1_0(name);    \
  int softverbs_##name##_1_0(void) { return EINVAL; }

extern "C" {

SOFTVERBS_COMPAT_CREATE(ibv_create_cq)
SOFTVERBS_COMPAT_CREATE(ibv_create_qp)
SOFTVERBS_COMPAT_CREATE(ibv_create_srq)
SOFTVERBS_COMPAT_CREATE(ibv_create_ah)

SOFTVERBS_COMPAT_UNKNOWN(ibv_destroy_cq)
SOFTVERBS_COMPAT_UNKNOWN(ibv_resize_cq)
SOFTVERBS_COMPAT_UNKNOWN(ibv_destroy_qp)
SOFTVERBS_COMPAT_UNKNOWN(ibv_modify_qp)
SOFTVERBS_COMPAT_UNKNOWN(ibv_query_qp)
SOFTVERBS_COMPAT_UNKNOWN(ibv_destroy_srq)
SOFTVERBS_COMPAT_UNKNOWN(ibv_modify_srq)
SOFTVERBS_COMPAT_UNKNOWN(ibv_query_srq)
SOFTVERBS_COMPAT_UNKNOWN(ibv_destroy_ah)
SOFTVERBS_COMPAT_UNKNOWN(ibv_attach_mcast)
SOFTVERBS_COMPAT_UNKNOWN(ibv_detach_mcast)

// The 1.0 event verbs hand out 1.0 objects, which cannot exist: -1, ENOSYS.
SOFTVERBS_COMPAT_QUEUE_1_0(ibv_get_cq_event);
int softverbs_ibv_get_cq_event_1_0(void) {
  errno = ENOSYS;
  return -1;
}

SOFTVERBS_COMPAT_QUEUE_1_0(ibv_get_async_event);
int softverbs_ibv_get_async_event_1_0(void) {
  errno = ENOSYS;
  return -1;
}

SOFTVERBS_COMPAT_QUEUE_1_0(ibv_ack_cq_events);
void softverbs_ibv_ack_cq_events_1_0(void) {}

SOFTVERBS_COMPAT_QUEUE_1_0(ibv_ack_async_event);
void softverbs_ibv_ack_async_event_1_0(void) {}

}  // extern "C"
