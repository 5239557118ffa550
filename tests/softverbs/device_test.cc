// The device side of softverbs: it is what an unmodified program linked with
// -libverbs loads, it lists one device, and its verbs_context ops table
// answers rdma-core's inline ibv_query_device_ex / ibv_query_port.
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/softverbs/fixture.h"
#include "tests/softverbs/softverbs_client.h"

namespace softverbs {
namespace {

TEST(SoftverbsLoading, ProgramLinkedAgainstRealLibibverbsLoadsSoftverbs) {
  Client client;
  ASSERT_TRUE(client.loaded());
  const std::string verbs = Client::LibraryOf("ibv_get_device_list");
  EXPECT_EQ(verbs, Client::LibraryOf("softverbs_get_counters"));
  EXPECT_NE(verbs.find("tests/softverbs/libibverbs.so.1"), std::string::npos) << verbs;
}

TEST(SoftverbsDevice, ListsOneDeviceNamedSoftverbs0) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 1);
  EXPECT_STREQ(ibv_get_device_name(list[0]), "softverbs0");
  EXPECT_EQ(list[1], nullptr);
  ibv_free_device_list(list);
}

TEST_F(SoftverbsTest, DeviceGuidMatchesNodeGuid) {
  ibv_device_attr attr;
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(ibv_get_device_guid(list_[0]), attr.node_guid);
  EXPECT_NE(attr.node_guid, 0u);
  EXPECT_EQ(attr.phys_port_cnt, 1);
}

TEST_F(SoftverbsTest, ContextIsExtendedSoInlineVerbsDispatchToIt) {
  verbs_context* vctx = verbs_get_ctx(ctx_);
  ASSERT_NE(vctx, nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, query_device_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, advise_mr), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, query_port), nullptr);
}

TEST_F(SoftverbsTest, QueryPortReportsAnActiveInfinibandPort) {
  ibv_port_attr port;
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(ibv_query_port(ctx_, 2, &port), EINVAL);
}

// A child made by fork() is another port on the fabric: its own LID, while
// the parent keeps its own.
TEST_F(SoftverbsTest, ForkedChildGetsALidOfItsOwn) {
  ibv_port_attr port;
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  const uint16_t parent_lid = port.lid;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    ibv_context* ctx = ibv_open_device(list_[0]);
    ibv_port_attr child;
    if (ctx == nullptr || ibv_query_port(ctx, 1, &child) != 0) _exit(2);
    _exit(child.lid != 0 && child.lid != parent_lid ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  EXPECT_EQ(port.lid, parent_lid);
}

// Each process is its own port on the fabric: the GID is the node GUID with
// the port's LID in its low 16 bits.
TEST_F(SoftverbsTest, QueryGidGivesLinkLocalPrefixGuidAndPortLid) {
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  ibv_port_attr port;
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  ASSERT_NE(port.lid, 0);
  EXPECT_LT(port.lid, 0xc000);  // a unicast LID
  EXPECT_EQ(be64toh(gid.global.subnet_prefix), 0xfe80000000000000ULL);
  EXPECT_EQ(be64toh(gid.global.interface_id),
            (be64toh(ibv_get_device_guid(list_[0])) & ~0xffffULL) | port.lid);
  EXPECT_EQ(ibv_query_gid(ctx_, 1, 1, &gid), -1);
}

TEST_F(SoftverbsTest, QueryDeviceExWithoutOdpReportsNoOdpSupport) {
  ibv_device_attr_ex attr;
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  EXPECT_EQ(attr.odp_caps.general_caps, 0u);
  EXPECT_EQ(attr.odp_caps.per_transport_caps.rc_odp_caps, 0u);
  EXPECT_EQ(attr.orig_attr.phys_port_cnt, 1);
}

class ExplicitOdpDevice : public SoftverbsTest {
  const char* odp() const override { return "explicit"; }
};

TEST_F(ExplicitOdpDevice, QueryDeviceExReportsOdpWithoutImplicit) {
  ibv_device_attr_ex attr;
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  EXPECT_EQ(attr.odp_caps.general_caps, static_cast<uint64_t>(IBV_ODP_SUPPORT));
  EXPECT_TRUE(attr.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE);
  EXPECT_TRUE(attr.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_READ);
}

class ImplicitOdpDevice : public SoftverbsTest {
  const char* odp() const override { return "implicit"; }
};

TEST_F(ImplicitOdpDevice, QueryDeviceExReportsImplicitOdp) {
  ibv_device_attr_ex attr;
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  EXPECT_EQ(attr.odp_caps.general_caps,
            static_cast<uint64_t>(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
}

TEST_F(SoftverbsTest, QueryDeviceExRejectsUnknownInputCompMask) {
  ibv_query_device_ex_input input{};
  input.comp_mask = 1;
  ibv_device_attr_ex attr;
  EXPECT_EQ(ibv_query_device_ex(ctx_, &input, &attr), EINVAL);
}

TEST(SoftverbsFork, ForkInitSucceedsAndProtectionIsUnneeded) {
  EXPECT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

TEST(SoftverbsDevice, CloseDeviceReleasesWhatTheContextStillOwns) {
  Client client;
  ibv_device** list = ibv_get_device_list(nullptr);
  ASSERT_NE(list, nullptr);
  ibv_context* ctx = ibv_open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  static char buf[8192];
  ASSERT_NE(ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE), nullptr);
  const softverbs_counters before = client.Counters();
  EXPECT_EQ(ibv_close_device(ctx), 0);
  const softverbs_counters after = client.Counters();
  EXPECT_EQ(after.mrs_released_by_close, before.mrs_released_by_close + 1);
  EXPECT_EQ(after.live_mrs, before.live_mrs - 1);
  EXPECT_EQ(after.live_pds, before.live_pds - 1);
  ibv_free_device_list(list);
}

TEST(SoftverbsDevice, CloseOfUnknownContextIsEinval) {
  ibv_context fake{};
  errno = 0;
  EXPECT_EQ(ibv_close_device(&fake), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softverbs
