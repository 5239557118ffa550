// shim_fixture.h: a GoogleTest fixture for tests run with libmrcache_preload.so
// preloaded (run_with_shim.sh) against softverbs: a device, a PD and a 1 MiB
// buffer; at teardown the PD is deallocated (flushing its cache) and every
// registration the test caused must have been deregistered.
#ifndef TESTS_INTERPOSE_SHIM_FIXTURE_H_
#define TESTS_INTERPOSE_SHIM_FIXTURE_H_

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "interpose/preload.h"
#include "tests/softverbs/softverbs_client.h"

namespace shim_test {

using StatsFn = void (*)(mrcache_preload_stats*);

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "run against softverbs (LD_LIBRARY_PATH=tests/softverbs)";
    stats_fn_ = reinterpret_cast<StatsFn>(dlsym(RTLD_DEFAULT, "mrcache_preload_get_stats"));
    ASSERT_NE(stats_fn_, nullptr) << "libmrcache_preload.so is not preloaded";
    before_ = client_.Counters();
    list_ = ibv_get_device_list(nullptr);
    ASSERT_NE(list_, nullptr);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    buf_ = static_cast<char*>(aligned_alloc(page_, kBytes));
    memset(buf_, 0, kBytes);
  }

  // Deallocating the PD flushes its cache: afterwards every registration the
  // test caused has been deregistered.
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
    free(buf_);
    softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_mrs, before_.live_mrs) << "MRs leaked";
    EXPECT_EQ(now.registrations - before_.registrations,
              now.deregistrations - before_.deregistrations + now.mrs_released_by_close -
                  before_.mrs_released_by_close);
    EXPECT_EQ(Stats().live_aliases, 0u);
  }

  mrcache_preload_stats Stats() const {
    mrcache_preload_stats s{};
    if (stats_fn_ != nullptr) stats_fn_(&s);
    return s;
  }

  uint64_t DeviceRegistrations() const { return client_.Counters().registrations; }

  // True if a device write through mr's lkey at addr is what the CPU sees.
  bool WriteLands(const ibv_mr* mr, void* addr, size_t len = 64) {
    std::vector<unsigned char> src(len);
    for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 13 + 7);
    memset(addr, 0, len);
    if (client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(addr), src.data(), len) != 0) {
      return false;
    }
    return memcmp(addr, src.data(), len) == 0;
  }

  static constexpr size_t kBytes = 1 << 20;
  softverbs::Client client_;
  StatsFn stats_fn_ = nullptr;
  softverbs_counters before_{};
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  size_t page_ = 4096;
  char* buf_ = nullptr;
};

}  // namespace shim_test

#endif  // TESTS_INTERPOSE_SHIM_FIXTURE_H_
