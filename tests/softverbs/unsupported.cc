// unsupported.cc: verbs for features softverbs' device does not have. Each
// answers as libibverbs does for a device whose provider lacks the feature:
// an int verb returns EOPNOTSUPP, a pointer verb NULL with errno EOPNOTSUPP,
// a void verb does nothing.
//
// Not modelled: multicast, importing objects from another process's
// context, enhanced connection establishment (ECE), RoCE's Ethernet
// addresses, and the data-in-order query (which then answers 0, "not
// guaranteed", as libibverbs does without the provider's answer).
#include <infiniband/verbs.h>

#include <cerrno>

extern "C" {

int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  (void)qp;
  (void)gid;
  (void)lid;
  return EOPNOTSUPP;
}

int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  (void)qp;
  (void)gid;
  (void)lid;
  return EOPNOTSUPP;
}

ibv_context* ibv_import_device(int cmd_fd) {
  (void)cmd_fd;
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  (void)context;
  (void)pd_handle;
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  (void)pd;
  (void)mr_handle;
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  (void)context;
  (void)dm_handle;
  errno = EOPNOTSUPP;
  return nullptr;
}

// No object is ever imported, so there is nothing to release.
void ibv_unimport_pd(ibv_pd* pd) { (void)pd; }
void ibv_unimport_mr(ibv_mr* mr) { (void)mr; }
void ibv_unimport_dm(ibv_dm* dm) { (void)dm; }

int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  (void)qp;
  (void)ece;
  return EOPNOTSUPP;
}

int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  (void)qp;
  (void)ece;
  return EOPNOTSUPP;
}

int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  (void)qp;
  (void)op;
  (void)flags;
  return 0;
}

// softverbs' port is InfiniBand: a GID there names no Ethernet neighbour.
int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr, uint8_t eth_mac[6],
                                uint16_t* vid) {
  (void)context;
  (void)attr;
  (void)eth_mac;
  (void)vid;
  return EINVAL;
}

}  // extern "C"
