// The IBVERBS_1.0 ABI: the compat variants of the device, PD and MR verbs
// exist beside the 1.1 defaults, wrap them, and keep their rules.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "tests/softverbs/compat_1_0.h"
#include "tests/softverbs/softverbs_client.h"

namespace softverbs {
namespace {

template <typename Fn>
Fn Compat(const char* name) {
  return reinterpret_cast<Fn>(dlvsym(RTLD_DEFAULT, name, "IBVERBS_1.0"));
}

// The 1.0 entry points, looked up by version.
struct Api {
  ibv_device_1_0** (*get_device_list)(int*) =
      Compat<decltype(get_device_list)>("ibv_get_device_list");
  void (*free_device_list)(ibv_device_1_0**) =
      Compat<decltype(free_device_list)>("ibv_free_device_list");
  const char* (*get_device_name)(ibv_device_1_0*) =
      Compat<decltype(get_device_name)>("ibv_get_device_name");
  ibv_context_1_0* (*open_device)(ibv_device_1_0*) =
      Compat<decltype(open_device)>("ibv_open_device");
  int (*close_device)(ibv_context_1_0*) = Compat<decltype(close_device)>("ibv_close_device");
  int (*query_device)(ibv_context_1_0*,
                      ibv_device_attr*) = Compat<decltype(query_device)>("ibv_query_device");
  ibv_pd_1_0* (*alloc_pd)(ibv_context_1_0*) = Compat<decltype(alloc_pd)>("ibv_alloc_pd");
  int (*dealloc_pd)(ibv_pd_1_0*) = Compat<decltype(dealloc_pd)>("ibv_dealloc_pd");
  ibv_mr_1_0* (*reg_mr)(ibv_pd_1_0*, void*, size_t, int) = Compat<decltype(reg_mr)>("ibv_reg_mr");
  int (*dereg_mr)(ibv_mr_1_0*) = Compat<decltype(dereg_mr)>("ibv_dereg_mr");
};

class Compat10 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded());
    ASSERT_NE(api_.reg_mr, nullptr) << "no ibv_reg_mr@IBVERBS_1.0";
    list_ = api_.get_device_list(nullptr);
    ASSERT_NE(list_, nullptr);
    ctx_ = api_.open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    pd_ = api_.alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(api_.dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(api_.close_device(ctx_), 0);
    }
    if (list_ != nullptr) api_.free_device_list(list_);
  }
  Api api_;
  Client client_;
  ibv_device_1_0** list_ = nullptr;
  ibv_context_1_0* ctx_ = nullptr;
  ibv_pd_1_0* pd_ = nullptr;
};

TEST(Compat10Symbols, DefaultBindingIsTheOneDotOneVerb) {
  void* plain = dlsym(RTLD_DEFAULT, "ibv_reg_mr");
  EXPECT_EQ(plain, dlvsym(RTLD_DEFAULT, "ibv_reg_mr", "IBVERBS_1.1"));
  EXPECT_NE(plain, dlvsym(RTLD_DEFAULT, "ibv_reg_mr", "IBVERBS_1.0"));
}

TEST_F(Compat10, ListsTheSameDevice) {
  EXPECT_STREQ(api_.get_device_name(list_[0]), "softverbs0");
  EXPECT_EQ(list_[1], nullptr);
  ibv_device_attr attr;
  EXPECT_EQ(api_.query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.phys_port_cnt, 1);
}

TEST_F(Compat10, RegMrWrapsARealRegistration) {
  static char buf[16384];
  const softverbs_counters before = client_.Counters();
  ibv_mr_1_0* mr = api_.reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(mr->pd, pd_);
  EXPECT_EQ(mr->context, ctx_);
  EXPECT_EQ(mr->lkey, mr->real_mr->lkey);
  EXPECT_EQ(client_.Counters().registrations, before.registrations + 1);
  const char data[] = "compat";
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf), data, sizeof data), 0);
  EXPECT_STREQ(buf, "compat");
  EXPECT_EQ(api_.dealloc_pd(pd_), EBUSY);
  EXPECT_EQ(api_.dereg_mr(mr), 0);
  EXPECT_EQ(client_.Counters().live_mrs, before.live_mrs);
}

TEST_F(Compat10, RegMrKeepsTheAccessRules) {
  static char buf[4096];
  errno = 0;
  EXPECT_EQ(api_.reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Compat10, UnknownObjectsAreEinval) {
  ibv_mr_1_0 mr{};
  ibv_pd_1_0 pd{};
  EXPECT_EQ(api_.dereg_mr(&mr), EINVAL);
  EXPECT_EQ(api_.dealloc_pd(&pd), EINVAL);
  errno = 0;
  EXPECT_EQ(api_.reg_mr(&pd, &mr, sizeof mr, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Compat10, CloseReleasesWhatTheContextStillOwns) {
  static char buf[4096];
  ASSERT_NE(api_.reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE), nullptr);
  const softverbs_counters before = client_.Counters();
  EXPECT_EQ(api_.close_device(ctx_), 0);
  ctx_ = nullptr;
  pd_ = nullptr;
  EXPECT_EQ(client_.Counters().live_mrs, before.live_mrs - 1);
}

}  // namespace
}  // namespace softverbs
