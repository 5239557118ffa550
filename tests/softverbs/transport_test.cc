// Queues of softverbs: CQs, completion channels, the QP state machine, and
// RC/UC/UD traffic between two QPs of this process (the same port, so the
// same fabric path two processes use). The target side checks rkeys and
// lkeys like a NIC and moves data through the pages pinned at registration.
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

constexpr size_t kBuf = 256 * 1024;  // > 64 KiB: messages span several packets

// Two QPs of one type on one PD and CQ, connected to each other.
class Transport : public SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    if (HasFatalFailure()) return;
    ibv_port_attr port;
    ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
    lid_ = port.lid;
    cq_ = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    for (char*& b : buf_) {
      b = static_cast<char*>(MapPages(kBuf));
      ASSERT_NE(b, nullptr);
    }
    for (int i = 0; i < 2; ++i) {
      mr_[i] = ibv_reg_mr(pd_, buf_[i], kBuf, kAllAccess);
      ASSERT_NE(mr_[i], nullptr);
    }
  }

  void TearDown() override {
    for (ibv_qp*& qp : qp_) {
      if (qp != nullptr) {
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
      }
      qp = nullptr;
    }
    if (cq_ != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq_), 0);
    }
    for (int i = 0; i < 2; ++i) {
      if (mr_[i] != nullptr) {
        EXPECT_EQ(ibv_dereg_mr(mr_[i]), 0);
      }
      if (buf_[i] != nullptr) munmap(buf_[i], kBuf);
    }
    SoftverbsTest::TearDown();
    softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_qps, before_.live_qps) << "the test leaked QPs";
    EXPECT_EQ(now.live_cqs, before_.live_cqs) << "the test leaked CQs";
  }

  static constexpr int kAllAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

  ibv_qp* NewQp(ibv_qp_type type, ibv_cq* send_cq = nullptr, uint32_t max_inline = 0) {
    ibv_qp_init_attr a{};
    a.send_cq = send_cq != nullptr ? send_cq : cq_;
    a.recv_cq = cq_;
    a.cap.max_inline_data = max_inline;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 2;
    a.qp_type = type;
    return ibv_create_qp(pd_, &a);
  }

  // RESET -> INIT -> RTR -> RTS, connected to the QP numbered `remote`.
  static int Connect(ibv_qp* qp, uint16_t lid, uint32_t remote, int access = kAllAccess,
                     uint8_t rnr_retry = 7, uint8_t retry_cnt = 7) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.pkey_index = 0;
    a.qp_access_flags = access;
    a.qkey = 0x11111111;
    const bool ud = qp->qp_type == IBV_QPT_UD;
    if (int err = ibv_modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                    (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS))) {
      return err;
    }
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;  // 10 µs
    a.ah_attr.dlid = lid;
    a.ah_attr.port_num = 1;
    int mask = IBV_QP_STATE;
    if (qp->qp_type != IBV_QPT_UD) {
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    }
    if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (int err = ibv_modify_qp(qp, &a, mask)) return err;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 100;
    a.timeout = 1;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 1;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (qp->qp_type == IBV_QPT_RC) {
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    return ibv_modify_qp(qp, &a, mask);
  }

  // Two QPs of `type`, each connected to the other.
  void Pair(ibv_qp_type type, int access = kAllAccess, uint8_t rnr_retry = 7) {
    qp_[0] = NewQp(type);
    qp_[1] = NewQp(type);
    ASSERT_NE(qp_[0], nullptr);
    ASSERT_NE(qp_[1], nullptr);
    ASSERT_EQ(Connect(qp_[0], lid_, qp_[1]->qp_num, access, rnr_retry), 0);
    ASSERT_EQ(Connect(qp_[1], lid_, qp_[0]->qp_num, access, rnr_retry), 0);
  }

  int PostRecv(ibv_qp* qp, uint64_t wr_id, char* at, uint32_t len, uint32_t lkey) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(at), len, lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp, &wr, &bad);
  }

  int PostSend(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, char* at, uint32_t len, uint32_t lkey,
               uint64_t remote = 0, uint32_t rkey = 0, uint32_t imm = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(at), len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32(imm);
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
  }

  // The next completion of cq_ (fails the test after 10 s without one).
  ibv_wc Next() {
    ibv_wc wc{};
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < give_up) {
      int n = ibv_poll_cq(cq_, 1, &wc);
      EXPECT_GE(n, 0);
      if (n == 1) return wc;
    }
    ADD_FAILURE() << "no completion within 10 s";
    wc.status = IBV_WC_GENERAL_ERR;
    wc.wr_id = ~0ULL;
    return wc;
  }

  // The completion of wr_id (others polled meanwhile are dropped).
  ibv_wc Wait(uint64_t wr_id) {
    for (int i = 0; i < 64; ++i) {
      ibv_wc wc = Next();
      if (wc.wr_id == wr_id || wc.wr_id == ~0ULL) return wc;
    }
    ADD_FAILURE() << "no completion for wr_id " << wr_id;
    return ibv_wc{};
  }

  static void Fill(char* p, size_t n, int seed) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>((i * 7 + seed) & 0xff);
  }

  uint16_t lid_ = 0;
  ibv_cq* cq_ = nullptr;
  char* buf_[2] = {nullptr, nullptr};
  ibv_mr* mr_[2] = {nullptr, nullptr};
  ibv_qp* qp_[2] = {nullptr, nullptr};
};

TEST_F(Transport, CreateCqRejectsBadArguments) {
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_create_cq(ctx_, 1 << 30, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(ibv_create_cq(ctx_, 4, nullptr, nullptr, 1), nullptr);  // one completion vector
  EXPECT_EQ(ibv_create_cq(nullptr, 4, nullptr, nullptr, 0), nullptr);
}

TEST_F(Transport, DestroyCqInUseIsEbusy) {
  Pair(IBV_QPT_RC);
  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);
}

TEST_F(Transport, DeallocPdWithQpIsEbusy) {
  qp_[0] = NewQp(IBV_QPT_RC);
  ASSERT_NE(qp_[0], nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
}

TEST_F(Transport, CreateQpRejectsUnsupportedTypeAndCaps) {
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq_;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_sge = 1000;
  EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Transport, ModifyQpEnforcesTheStateMachine) {
  qp_[0] = NewQp(IBV_QPT_RC);
  ASSERT_NE(qp_[0], nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;  // RESET -> RTR skips INIT
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), EINVAL);
  a.qp_state = IBV_QPS_INIT;  // INIT without its required attributes
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), EINVAL);
  a.port_num = 2;  // no such port
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            EINVAL);
  a.port_num = 1;
  a.sq_psn = 5;  // an attribute RESET -> INIT does not take
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS |
                              IBV_QP_SQ_PSN),
            EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  ibv_qp_attr q{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp_[0], &q, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(qp_[0]->state, IBV_QPS_INIT);
  a.qp_state = IBV_QPS_RTS;  // INIT -> RTS skips RTR
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), EINVAL);
}

TEST_F(Transport, ModifyQpRejectsOutOfRangeValues) {
  qp_[0] = NewQp(IBV_QPT_RC);
  ASSERT_EQ(Connect(qp_[0], lid_, 0x123), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.min_rnr_timer = 32;
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER), EINVAL);
  a.min_rnr_timer = 3;
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER), 0);
}

TEST_F(Transport, PostSendBeforeRtsIsEinval) {
  qp_[0] = NewQp(IBV_QPT_RC);
  ASSERT_NE(qp_[0], nullptr);
  EXPECT_EQ(PostSend(qp_[0], IBV_WR_SEND, 1, buf_[0], 8, mr_[0]->lkey), EINVAL);
}

TEST_F(Transport, PostSendRejectsOpcodesTheTransportLacks) {
  Pair(IBV_QPT_UC);
  EXPECT_EQ(PostSend(qp_[0], IBV_WR_RDMA_READ, 1, buf_[0], 8, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(buf_[1]), mr_[1]->rkey),
            EINVAL);
  EXPECT_EQ(PostSend(qp_[0], IBV_WR_ATOMIC_FETCH_AND_ADD, 1, buf_[0], 8, mr_[0]->lkey), EINVAL);
}

TEST_F(Transport, SendWithImmediateArrivesByteForByte) {
  Pair(IBV_QPT_RC);
  const size_t n = 200 * 1024;
  Fill(buf_[0], n, 3);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND_WITH_IMM, 8, buf_[0], n, mr_[0]->lkey, 0, 0, 0xabcd), 0);
  ibv_wc recv = Wait(7);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.opcode, IBV_WC_RECV);
  EXPECT_EQ(recv.byte_len, n);
  EXPECT_TRUE(recv.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(recv.imm_data), 0xabcdu);
  EXPECT_EQ(recv.qp_num, qp_[1]->qp_num);
  EXPECT_EQ(recv.src_qp, qp_[0]->qp_num);
  EXPECT_EQ(recv.slid, lid_);
  EXPECT_EQ(Wait(8).status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(buf_[0], buf_[1], n), 0);
}

TEST_F(Transport, RdmaWriteWithImmediateLandsAndConsumesAReceive) {
  Pair(IBV_QPT_RC);
  const size_t n = 100 * 1024;
  Fill(buf_[0], n, 5);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], 0, mr_[1]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE_WITH_IMM, 8, buf_[0], n, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(buf_[1]) + 4096, mr_[1]->rkey, 42),
            0);
  ibv_wc recv = Wait(7);
  EXPECT_EQ(recv.status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(be32toh(recv.imm_data), 42u);
  ibv_wc send = Wait(8);
  EXPECT_EQ(send.status, IBV_WC_SUCCESS);
  EXPECT_EQ(send.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(memcmp(buf_[1] + 4096, buf_[0], n), 0);
}

TEST_F(Transport, RdmaReadFetchesRemoteBytes) {
  Pair(IBV_QPT_RC);
  const size_t n = 150 * 1024;
  Fill(buf_[1], n, 9);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_READ, 8, buf_[0], n, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(buf_[1]), mr_[1]->rkey),
            0);
  ibv_wc wc = Wait(8);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, n);
  EXPECT_EQ(memcmp(buf_[0], buf_[1], n), 0);
}

TEST_F(Transport, WriteBeyondTheMrIsRemoteAccessErrorAndFlushesTheRest) {
  Pair(IBV_QPT_RC);
  const uint64_t past_end = reinterpret_cast<uintptr_t>(buf_[1]) + kBuf - 8;
  ASSERT_EQ(
      PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 16, mr_[0]->lkey, past_end, mr_[1]->rkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 9, buf_[0], 16, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(buf_[1]), mr_[1]->rkey),
            0);
  EXPECT_EQ(Wait(8).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Wait(9).status, IBV_WC_WR_FLUSH_ERR);
  ibv_qp_attr q{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp_[0], &q, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_ERR);
  // The 8 bytes inside the MR were not written either.
  for (size_t i = kBuf - 8; i < kBuf; ++i) {
    ASSERT_EQ(buf_[1][i], 0);
  }
}

TEST_F(Transport, WriteToAnMrWithoutRemoteWriteIsRemoteAccessError) {
  Pair(IBV_QPT_RC);
  char* other = static_cast<char*>(MapPages(4096));
  ibv_mr* read_only = ibv_reg_mr(pd_, other, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(read_only, nullptr);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 16, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(other), read_only->rkey),
            0);
  EXPECT_EQ(Wait(8).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(read_only), 0);
  munmap(other, 4096);
}

TEST_F(Transport, WriteToAQpWithoutRemoteWriteAccessIsRemoteAccessError) {
  Pair(IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 16, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(buf_[1]), mr_[1]->rkey),
            0);
  EXPECT_EQ(Wait(8).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(Transport, WriteThroughADeregisteredRkeyIsRemoteAccessError) {
  Pair(IBV_QPT_RC);
  const uint32_t dead = mr_[1]->rkey;
  ASSERT_EQ(ibv_dereg_mr(mr_[1]), 0);
  mr_[1] = nullptr;
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 16, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(buf_[1]), dead),
            0);
  EXPECT_EQ(Wait(8).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(Transport, SendFromAnUnknownLkeyIsLocalProtectionError) {
  Pair(IBV_QPT_RC);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 16, 0xdead00), 0);
  EXPECT_EQ(Wait(8).status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(Transport, SendBeyondTheLkeysMrIsLocalProtectionError) {
  Pair(IBV_QPT_RC);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0] + kBuf - 8, 16, mr_[0]->lkey), 0);
  EXPECT_EQ(Wait(8).status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(Transport, SendLargerThanTheReceiveIsLocalLengthErrorThere) {
  Pair(IBV_QPT_RC);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], 100, mr_[1]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 200, mr_[0]->lkey), 0);
  std::vector<ibv_wc> got = {Next(), Next()};
  for (const ibv_wc& wc : got) {
    if (wc.wr_id == 7) {
      EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
    }
    if (wc.wr_id == 8) {
      EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    }
  }
  EXPECT_NE(got[0].wr_id, got[1].wr_id);
}

TEST_F(Transport, SendWithoutAReceiveExhaustsTheRnrRetries) {
  Pair(IBV_QPT_RC, kAllAccess, /*rnr_retry=*/2);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 16, mr_[0]->lkey), 0);
  EXPECT_EQ(Wait(8).status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(Transport, SendWaitsForAReceivePostedLater) {
  Pair(IBV_QPT_RC);  // rnr_retry 7: retry forever
  Fill(buf_[0], 64, 1);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 64, mr_[0]->lkey), 0);
  usleep(20000);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  EXPECT_EQ(Wait(7).status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(buf_[0], buf_[1], 64), 0);
}

TEST_F(Transport, SendToAMissingQpExhaustsTheTransportRetries) {
  qp_[0] = NewQp(IBV_QPT_RC);
  ASSERT_EQ(Connect(qp_[0], lid_, 0xfffff0, kAllAccess, 7, /*retry_cnt=*/0), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 16, mr_[0]->lkey), 0);
  EXPECT_EQ(Wait(8).status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(Transport, WriteLandsInThePagesPinnedAtRegistration) {
  Pair(IBV_QPT_RC);
  // The application replaces the target's mapping behind the registration.
  char* target = buf_[1];
  ASSERT_EQ(munmap(target, kBuf), 0);
  ASSERT_EQ(
      mmap(target, kBuf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      target);
  Fill(buf_[0], 4096, 11);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 4096, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(target), mr_[1]->rkey),
            0);
  ASSERT_EQ(Wait(8).status, IBV_WC_SUCCESS);
  // The new mapping never sees the bytes; reading through the stale rkey does.
  for (size_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(target[i], 0) << i;
  }
  std::vector<char> back(4096);
  ASSERT_EQ(client_.remote_read(mr_[1]->rkey, reinterpret_cast<uintptr_t>(target), back.data(),
                                back.size()),
            0);
  EXPECT_EQ(memcmp(back.data(), buf_[0], 4096), 0);
}

TEST_F(Transport, ErrorStateFlushesPostedReceives) {
  Pair(IBV_QPT_RC);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], 64, mr_[1]->lkey), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);
  EXPECT_EQ(Wait(7).status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(Transport, UnsignaledSendsCompleteSilently) {
  Pair(IBV_QPT_RC);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_[0]), 8, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 8;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  EXPECT_EQ(Wait(7).status, IBV_WC_SUCCESS);
  ibv_wc wc;
  usleep(10000);
  EXPECT_EQ(ibv_poll_cq(cq_, 1, &wc), 0);
}

TEST_F(Transport, CompletionChannelRaisesAnEventOnceArmed) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(ibv_destroy_cq(cq_), 0);
  int marker = 0;
  cq_ = ibv_create_cq(ctx_, 8, &marker, ch, 0);
  ASSERT_NE(cq_, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // the CQ uses it
  Pair(IBV_QPT_RC);
  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 8, mr_[0]->lkey), 0);
  pollfd pfd{ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq_);
  EXPECT_EQ(ev_ctx, &marker);
  Wait(7);
  Wait(8);
  for (ibv_qp*& qp : qp_) {
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    qp = nullptr;
  }
  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);  // one event read, none acknowledged
  ibv_ack_cq_events(cq_, 1);
  EXPECT_EQ(ibv_destroy_cq(cq_), 0);
  cq_ = nullptr;
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Transport, ArmingACqWithoutAChannelSucceeds) {
  EXPECT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  EXPECT_EQ(ibv_req_notify_cq(cq_, 1), 0);
}

// The lost message (500 bytes of one pattern) and the next one (1000 bytes of
// another) differ, so the receive posted afterwards shows which arrived: the
// second, or the first was kept rather than dropped.
TEST_F(Transport, UcSendArrivesAndAMissingReceiveDropsTheMessage) {
  Pair(IBV_QPT_UC);
  Fill(buf_[0], 500, 2);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 500, mr_[0]->lkey), 0);
  EXPECT_EQ(Wait(8).status, IBV_WC_SUCCESS);  // complete on transmit, and lost
  usleep(20000);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  Fill(buf_[0], 1000, 3);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 9, buf_[0], 1000, mr_[0]->lkey), 0);
  ibv_wc wc = Wait(7);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 1000u) << "the receive got the message sent without one";
  EXPECT_EQ(memcmp(buf_[0], buf_[1], 1000), 0);
}

TEST_F(Transport, UdSendArrivesAfterA40ByteGrh) {
  qp_[0] = NewQp(IBV_QPT_UD);
  qp_[1] = NewQp(IBV_QPT_UD);
  ASSERT_EQ(Connect(qp_[0], lid_, 0), 0);
  ASSERT_EQ(Connect(qp_[1], lid_, 0), 0);
  ibv_ah_attr ah_attr{};
  ah_attr.dlid = lid_;
  ah_attr.port_num = 1;
  ibv_ah* ah = ibv_create_ah(pd_, &ah_attr);
  ASSERT_NE(ah, nullptr);
  Fill(buf_[0], 500, 4);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], 4096, mr_[1]->lkey), 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_[0]), 500, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 8;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qp_[1]->qp_num;
  wr.wr.ud.remote_qkey = 0x11111111;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  ibv_wc wc = Wait(7);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 540u);
  EXPECT_EQ(wc.src_qp, qp_[0]->qp_num);
  EXPECT_EQ(memcmp(buf_[1] + 40, buf_[0], 500), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);  // the AH is on it
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(Transport, SrqFeedsEveryQpAttachedToIt) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq_;
  a.srq = srq;
  a.cap.max_send_wr = 4;
  a.cap.max_send_sge = 1;
  a.qp_type = IBV_QPT_RC;
  qp_[0] = NewQp(IBV_QPT_RC);
  qp_[1] = ibv_create_qp(pd_, &a);
  ASSERT_NE(qp_[1], nullptr);
  ASSERT_EQ(Connect(qp_[0], lid_, qp_[1]->qp_num), 0);
  ASSERT_EQ(Connect(qp_[1], lid_, qp_[0]->qp_num), 0);
  EXPECT_EQ(PostRecv(qp_[1], 7, buf_[1], 64, mr_[1]->lkey), EINVAL);  // use the SRQ
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_[1]), 64, mr_[1]->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 64, mr_[0]->lkey), 0);
  ibv_wc wc = Wait(7);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.qp_num, qp_[1]->qp_num);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);  // a QP uses it
  EXPECT_EQ(ibv_destroy_qp(qp_[1]), 0);
  qp_[1] = nullptr;
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(Transport, WrApiPostsSendsLikePostSend) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = a.recv_cq = cq_;
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd_;
  a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  qp_[0] = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(qp_[0], nullptr);
  qp_[1] = NewQp(IBV_QPT_RC);
  EXPECT_EQ(ibv_qp_to_qp_ex(qp_[1]), nullptr);  // created without send_ops_flags
  ASSERT_EQ(Connect(qp_[0], lid_, qp_[1]->qp_num), 0);
  ASSERT_EQ(Connect(qp_[1], lid_, qp_[0]->qp_num), 0);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp_[0]);
  ASSERT_NE(qpx, nullptr);
  Fill(buf_[0], 128, 6);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], 64, mr_[1]->lkey), 0);
  ibv_wr_start(qpx);
  qpx->wr_id = 8;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, mr_[0]->lkey, reinterpret_cast<uintptr_t>(buf_[0]), 64);
  qpx->wr_id = 9;
  ibv_wr_rdma_write(qpx, mr_[1]->rkey, reinterpret_cast<uintptr_t>(buf_[1]) + 64);
  ibv_wr_set_sge(qpx, mr_[0]->lkey, reinterpret_cast<uintptr_t>(buf_[0]) + 64, 64);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  EXPECT_EQ(Wait(9).status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(buf_[0], buf_[1], 128), 0);
}

TEST_F(Transport, InlineSendNeedsNoLkey) {
  qp_[0] = NewQp(IBV_QPT_RC, nullptr, /*max_inline=*/64);
  qp_[1] = NewQp(IBV_QPT_RC);
  ASSERT_NE(qp_[0], nullptr);
  ibv_qp_attr q{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp_[0], &q, IBV_QP_CAP, &init), 0);
  EXPECT_EQ(init.cap.max_inline_data, 64u);
  ASSERT_EQ(Connect(qp_[0], lid_, qp_[1]->qp_num), 0);
  ASSERT_EQ(Connect(qp_[1], lid_, qp_[0]->qp_num), 0);
  char unregistered[48];
  Fill(unregistered, sizeof unregistered, 8);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], kBuf, mr_[1]->lkey), 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(unregistered), sizeof unregistered, 0};
  ibv_send_wr wr{};
  wr.wr_id = 8;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  memset(unregistered, 0, sizeof unregistered);  // copied at post time
  EXPECT_EQ(Wait(7).status, IBV_WC_SUCCESS);
  char expected[48];
  Fill(expected, sizeof expected, 8);
  EXPECT_EQ(memcmp(buf_[1], expected, sizeof expected), 0);
  sge.length = 65;  // more than max_inline_data
  EXPECT_EQ(ibv_post_send(qp_[0], &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_F(Transport, PostSendBeyondMaxSendWrIsEnomemAtTheFirstExtraWr) {
  Pair(IBV_QPT_RC);  // no receives: the first SEND stays in flight (RNR, forever)
  std::vector<ibv_sge> sges(17, ibv_sge{reinterpret_cast<uintptr_t>(buf_[0]), 8, mr_[0]->lkey});
  std::vector<ibv_send_wr> wrs(17);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp_[0], &wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[16]);  // max_send_wr is 16
}

TEST_F(Transport, CompletionQueueOverrunMakesPollFail) {
  ibv_cq* tiny = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
  ASSERT_NE(tiny, nullptr);
  qp_[0] = NewQp(IBV_QPT_RC, tiny);
  qp_[1] = NewQp(IBV_QPT_RC);
  ASSERT_EQ(Connect(qp_[0], lid_, qp_[1]->qp_num), 0);
  ASSERT_EQ(Connect(qp_[1], lid_, qp_[0]->qp_num), 0);
  ASSERT_EQ(PostRecv(qp_[1], 7, buf_[1], 64, mr_[1]->lkey), 0);
  ASSERT_EQ(PostRecv(qp_[1], 17, buf_[1], 64, mr_[1]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 8, buf_[0], 8, mr_[0]->lkey), 0);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_SEND, 9, buf_[0], 8, mr_[0]->lkey), 0);
  Wait(7);
  Wait(17);
  // Once the second send is acknowledged its CQE finds the CQ full. Polling
  // zero entries consumes nothing (which would make room) and reports it.
  ibv_wc wc[1];
  int polled = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (polled == 0 && std::chrono::steady_clock::now() < give_up)
    polled = ibv_poll_cq(tiny, 0, wc);
  EXPECT_LT(polled, 0);
  EXPECT_EQ(ibv_destroy_qp(qp_[0]), 0);
  qp_[0] = nullptr;
  EXPECT_EQ(ibv_destroy_cq(tiny), 0);
}

// ODP MRs are reached through the current page tables, so a replaced mapping
// receives the write (unlike pinned MRs, WriteLandsInThePagesPinnedAtRegistration).
class OdpTransport : public Transport {
 protected:
  const char* odp() const override { return "explicit"; }

  // An ODP MR over kBuf bytes at *target, which is then unmapped.
  ibv_mr* OdpMrOverUnmappedMemory(char** target) {
    *target = static_cast<char*>(MapPages(kBuf));
    if (*target == nullptr) return nullptr;
    ibv_mr* mr = ibv_reg_mr(pd_, *target, kBuf, kAllAccess | IBV_ACCESS_ON_DEMAND);
    EXPECT_EQ(munmap(*target, kBuf), 0);
    return mr;
  }
};

TEST_F(OdpTransport, WriteToAnOdpMrLandsInTheCurrentMapping) {
  Pair(IBV_QPT_RC);
  char* target = nullptr;
  ibv_mr* odp = OdpMrOverUnmappedMemory(&target);
  ASSERT_NE(odp, nullptr);
  ASSERT_EQ(
      mmap(target, kBuf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      target);
  Fill(buf_[0], 4096, 12);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 4096, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(target), odp->rkey),
            0);
  EXPECT_EQ(Wait(8).status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target, buf_[0], 4096), 0);
  EXPECT_EQ(ibv_dereg_mr(odp), 0);
  munmap(target, kBuf);
}

TEST_F(OdpTransport, WriteToUnmappedOdpMemoryIsRemoteAccessError) {
  Pair(IBV_QPT_RC);
  char* target = nullptr;
  ibv_mr* odp = OdpMrOverUnmappedMemory(&target);
  ASSERT_NE(odp, nullptr);
  ASSERT_EQ(PostSend(qp_[0], IBV_WR_RDMA_WRITE, 8, buf_[0], 4096, mr_[0]->lkey,
                     reinterpret_cast<uintptr_t>(target), odp->rkey),
            0);
  EXPECT_EQ(Wait(8).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(odp), 0);
}

TEST_F(Transport, CloseDeviceReleasesQueuesLeftBehind) {
  Pair(IBV_QPT_RC);
  ibv_context* ctx = ibv_open_device(list_[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.cap.max_send_wr = a.cap.max_recv_wr = a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  ASSERT_NE(ibv_create_qp(pd, &a), nullptr);
  const softverbs_counters with = client_.Counters();
  EXPECT_EQ(ibv_close_device(ctx), 0);
  const softverbs_counters after = client_.Counters();
  EXPECT_EQ(after.live_qps, with.live_qps - 1);
  EXPECT_EQ(after.live_cqs, with.live_cqs - 1);
}

}  // namespace
}  // namespace softverbs
