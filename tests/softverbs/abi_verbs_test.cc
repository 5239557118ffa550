// The verbs softverbs added for ABI completeness behave as their man pages
// say for a device without the feature: they answer, they never crash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <string.h>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

using AbiVerbsTest = SoftverbsTest;

TEST_F(AbiVerbsTest, GidEntryOfPortOneIndexZeroIsTheGidOfTypeIb) {
  ibv_gid_entry entry;
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &entry, 0), 0);
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  EXPECT_EQ(memcmp(&entry.gid, &gid, sizeof gid), 0);
  EXPECT_EQ(entry.gid_index, 0u);
  EXPECT_EQ(entry.port_num, 1u);
  EXPECT_EQ(entry.gid_type, static_cast<uint32_t>(IBV_GID_TYPE_IB));
}

TEST_F(AbiVerbsTest, GidEntryBeyondTheTableIsEnodataAndOfAnotherPortEinval) {
  ibv_gid_entry entry;
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 1, &entry, 0), ENODATA);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 2, 0, &entry, 0), EINVAL);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &entry, 1), EINVAL);  // unknown flag
}

TEST_F(AbiVerbsTest, GidTableHasOneEntry) {
  ibv_gid_entry entries[4];
  EXPECT_EQ(ibv_query_gid_table(ctx_, entries, 4, 0), 1);
  EXPECT_EQ(ibv_query_gid_table(ctx_, entries, 0, 0), -EINVAL);
}

TEST_F(AbiVerbsTest, AsyncFdIsPollableAndQuiet) {
  ASSERT_GE(ctx_->async_fd, 0);
  pollfd p = {ctx_->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
}

TEST_F(AbiVerbsTest, NonBlockingGetAsyncEventIsEagainWithoutEvents) {
  const int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  ibv_async_event event;
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(ctx_, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(AbiVerbsTest, UnmodelledFeaturesAreEopnotsupp) {
  errno = 0;
  EXPECT_EQ(ibv_import_device(ctx_->cmd_fd), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(ctx_, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(pd_, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_import_dm(ctx_, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(AbiVerbsTest, MulticastAndEceOnAQpAreEopnotsupp) {
  ibv_cq* cq = ibv_create_cq(ctx_, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr init = {};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  ibv_gid gid = {};
  EXPECT_EQ(ibv_attach_mcast(qp, &gid, 0xc001), EOPNOTSUPP);
  EXPECT_EQ(ibv_detach_mcast(qp, &gid, 0xc001), EOPNOTSUPP);
  ibv_ece ece = {};
  EXPECT_EQ(ibv_query_ece(qp, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_set_ece(qp, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST(AbiHelpersTest, RatesConvertBothWays) {
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
  EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_14_GBPS), -1);  // not a multiple of 2.5 Gbit/s
  EXPECT_EQ(mult_to_ibv_rate(3), IBV_RATE_MAX);
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
  EXPECT_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
  EXPECT_EQ(mbps_to_ibv_rate(1), IBV_RATE_MAX);
}

TEST(AbiHelpersTest, EventTypesHaveNames) {
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active");
  EXPECT_STREQ(ibv_event_type_str(static_cast<ibv_event_type>(1000)), "unknown");
}

TEST_F(AbiVerbsTest, AhFromAWcWithGrhAddressesTheSender) {
  ibv_gid local;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &local), 0);
  ibv_grh grh = {};
  grh.dgid = local;
  grh.sgid.raw[0] = 0xfe;
  grh.sgid.raw[15] = 7;
  grh.version_tclass_flow = htobe32((6u << 28) | (5u << 20) | 0x12345);
  ibv_wc wc = {};
  wc.slid = 0x42;
  wc.sl = 3;
  wc.wc_flags = IBV_WC_GRH;
  ibv_ah_attr attr;
  ASSERT_EQ(ibv_init_ah_from_wc(ctx_, 1, &wc, &grh, &attr), 0);
  EXPECT_EQ(attr.dlid, 0x42);
  EXPECT_EQ(attr.sl, 3);
  EXPECT_EQ(attr.port_num, 1);
  EXPECT_EQ(attr.is_global, 1);
  EXPECT_EQ(memcmp(&attr.grh.dgid, &grh.sgid, sizeof grh.sgid), 0);
  EXPECT_EQ(attr.grh.sgid_index, 0);
  EXPECT_EQ(attr.grh.flow_label, 0x12345u);
  EXPECT_EQ(attr.grh.traffic_class, 5);
  ibv_ah* ah = ibv_create_ah_from_wc(pd_, &wc, &grh, 1);
  ASSERT_NE(ah, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(AbiVerbsTest, AhFromAWcWhoseGrhNamesNoLocalGidIsEnoent) {
  ibv_grh grh = {};  // destination GID :: is not ours
  ibv_wc wc = {};
  wc.wc_flags = IBV_WC_GRH;
  ibv_ah_attr attr;
  EXPECT_EQ(ibv_init_ah_from_wc(ctx_, 1, &wc, &grh, &attr), ENOENT);
}

}  // namespace
}  // namespace softverbs
