// rc_end.h: one end of an RC connection for tests that move data between
// softverbs contexts (of one device or of different devices): a context, a
// PD, a CQ and an RC QP, with helpers to connect it and post one-sided RDMA.
#ifndef SOFTVERBS_RC_END_H_
#define SOFTVERBS_RC_END_H_

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>

namespace softverbs {

struct RcEnd {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint16_t lid = 0;

  // Opens `device` with a PD, a CQ and an RC QP in RESET. false on failure.
  bool Open(ibv_device* device) {
    ctx = ibv_open_device(device);
    if (ctx == nullptr) return false;
    ibv_port_attr port{};
    if (ibv_query_port(ctx, 1, &port) != 0) return false;
    lid = port.lid;
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (pd == nullptr || cq == nullptr) return false;
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.qp_type = IBV_QPT_RC;
    qp = ibv_create_qp(pd, &a);
    return qp != nullptr;
  }

  // RESET -> INIT -> RTR -> RTS, connected to `peer`, granting it remote
  // read and write. 0 or the failing ibv_modify_qp's errno.
  int ConnectTo(const RcEnd& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (int err = ibv_modify_qp(
            qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
      return err;
    }
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qp->qp_num;
    a.rq_psn = 1;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.port_num = 1;
    if (int err =
            ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      return err;
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    a.timeout = 1;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  }

  // Posts one signalled RDMA READ or WRITE of len bytes between local
  // [at, at+len) (lkey) and the peer's `remote` (rkey) and returns its
  // completion status (IBV_WC_GENERAL_ERR if posting failed or nothing
  // completed within 10 s).
  ibv_wc_status Rdma(ibv_wr_opcode op, void* at, uint32_t len, uint32_t lkey, uint64_t remote,
                     uint32_t rkey) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(at), len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    ibv_wc wc{};
    while (std::chrono::steady_clock::now() < give_up) {
      if (ibv_poll_cq(cq, 1, &wc) == 1) return wc.status;
    }
    ADD_FAILURE() << "no completion within 10 s";
    return IBV_WC_GENERAL_ERR;
  }

  // Destroys what Open made (EXPECTs each step to succeed).
  void Close() {
    if (qp != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    if (cq != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq), 0);
    }
    if (pd != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    }
    if (ctx != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx), 0);
    }
    *this = RcEnd{};
  }
};

}  // namespace softverbs

#endif  // SOFTVERBS_RC_END_H_
