// fixture.h: a GoogleTest fixture that opens softverbs' device with a chosen
// ODP level and a PD, and checks at teardown that the test left no MR behind
// (registrations == deregistrations).
#ifndef SOFTVERBS_FIXTURE_H_
#define SOFTVERBS_FIXTURE_H_

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tests/softverbs/softverbs_client.h"

namespace softverbs {

class SoftverbsTest : public ::testing::Test {
 protected:
  // SOFTVERBS_ODP for the device this fixture opens.
  virtual const char* odp() const { return "none"; }

  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs; run with "
                                     "LD_LIBRARY_PATH=tests/softverbs";
    before_ = client_.Counters();
    setenv("SOFTVERBS_ODP", odp(), 1);
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_EQ(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr) << "errno " << errno;
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }

  void TearDown() override {
    softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_mrs, before_.live_mrs) << "the test leaked MRs";
    EXPECT_EQ(now.registrations - before_.registrations,
              now.deregistrations - before_.deregistrations)
        << "registrations != deregistrations";
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
  }

  // Anonymous read-write memory, unmapped by the caller.
  static void* MapPages(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }

  Client client_;
  softverbs_counters before_{};
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

}  // namespace softverbs

#endif  // SOFTVERBS_FIXTURE_H_
