// cache_odp_test.cc: the cache's on-demand-paging modes (odp=off|explicit|
// implicit|auto) on the verbs registrar, against every capability setting of
// softverbs' device (SOFTVERBS_ODP=none|explicit|implicit).
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/verbs_registrar.h"
#include "tests/softverbs/softverbs_client.h"

namespace mrcache {
namespace {

constexpr int kRW = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

class CacheOdpTest : public ::testing::Test {
 protected:
  void Open(const char* device_odp) {
    setenv("SOFTVERBS_ODP", device_odp, 1);
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_EQ(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs";
    before_ = client_.Counters();
    buf_ = static_cast<char*>(
        mmap(nullptr, 512 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf_, MAP_FAILED);
  }

  absl::StatusOr<std::unique_ptr<Cache>> Create(const char* odp, size_t prefetch = 0) {
    Config config;
    config.registrar = "verbs";
    EXPECT_TRUE(config.Set("odp", odp).ok());
    config.odp_prefetch_bytes = prefetch;
    return Cache::Create(config, pd_);
  }

  softverbs_counters Now() { return client_.Counters(); }

  void TearDown() override {
    softverbs_counters now = Now();
    EXPECT_EQ(now.registrations - before_.registrations,
              now.deregistrations - before_.deregistrations)
        << "registrations != deregistrations";
    if (buf_ != nullptr) munmap(buf_, 512 * kPage);
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) ibv_close_device(ctx_);
    if (list_ != nullptr) ibv_free_device_list(list_);
  }

  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  char* buf_ = nullptr;
  softverbs_counters before_{};
  softverbs::Client client_;
};

TEST_F(CacheOdpTest, OffPinsRegionsOnAnOdpDevice) {
  Open("implicit");
  auto cache = Create("off");
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto r = (*cache)->Get(buf_, kPage, kRW);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->info().access & kAccessOnDemand);
  EXPECT_EQ(Now().odp_registrations, before_.odp_registrations);
  EXPECT_GT(Now().bytes_pinned, before_.bytes_pinned);
}

TEST_F(CacheOdpTest, ImplicitOnADeviceWithoutOdpIsAClearError) {
  Open("none");
  auto cache = Create("implicit");
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(StatusToErrno(cache.status()), ENOTSUP);
  EXPECT_NE(std::string(cache.status().message()).find("implicit"), std::string::npos)
      << cache.status();
}

TEST_F(CacheOdpTest, ExplicitOnADeviceWithoutOdpIsAClearError) {
  Open("none");
  auto cache = Create("explicit");
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(StatusToErrno(cache.status()), ENOTSUP);
}

TEST_F(CacheOdpTest, ImplicitOnAnExplicitOnlyDeviceIsAClearError) {
  Open("explicit");
  auto cache = Create("implicit");
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(StatusToErrno(cache.status()), ENOTSUP);
}

TEST_F(CacheOdpTest, ExplicitRegistersEachRegionOnDemandWithoutPinning) {
  Open("explicit");
  auto cache = Create("explicit");
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->monitor_name(), "none") << "ODP needs no memory monitor";
  auto r = (*cache)->Get(buf_, 4 * kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->info().access & kAccessOnDemand);
  EXPECT_EQ(Now().odp_registrations, before_.odp_registrations + 1);
  EXPECT_EQ(Now().bytes_pinned, before_.bytes_pinned);
  auto again = (*cache)->Get(buf_ + 100, 100, kRW);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), r->get()) << "explicit ODP regions are cached like pinned ones";
}

TEST_F(CacheOdpTest, ImplicitServesEveryRangeWithOneRegistration) {
  Open("implicit");
  auto cache = Create("implicit");
  ASSERT_TRUE(cache.ok()) << cache.status();
  uint64_t regs = Now().registrations;
  auto a = (*cache)->Get(buf_, kPage, kRW);
  auto b = (*cache)->Get(buf_ + 100 * kPage, 50 * kPage, kRW);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->info().lkey, b->info().lkey);
  EXPECT_EQ(a->info().addr, nullptr);
  EXPECT_EQ(a->info().length, SIZE_MAX);
  EXPECT_EQ(Now().registrations, regs) << "no registration per get";
}

TEST_F(CacheOdpTest, ImplicitDeviceWriteLandsAtTheAddress) {
  Open("implicit");
  auto cache = Create("implicit");
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto r = (*cache)->Get(buf_ + 7 * kPage, kPage, kRW);
  ASSERT_TRUE(r.ok());
  const char msg[] = "on demand";
  ASSERT_TRUE(
      (*cache)
          ->DeviceWrite(r->get(), reinterpret_cast<uintptr_t>(buf_ + 7 * kPage), msg, sizeof msg)
          .ok());
  EXPECT_STREQ(buf_ + 7 * kPage, msg);
}

TEST_F(CacheOdpTest, AutoPicksImplicitThenExplicitThenOff) {
  struct Case {
    const char* device;
    bool on_demand;
    bool whole_space;
  } cases[] = {{"implicit", true, true}, {"explicit", true, false}, {"none", false, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.device);
    TearDown();
    list_ = nullptr;
    ctx_ = nullptr;
    pd_ = nullptr;
    buf_ = nullptr;
    Open(c.device);
    auto cache = Create("auto");
    ASSERT_TRUE(cache.ok()) << cache.status();
    auto r = (*cache)->Get(buf_, kPage, kRW);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(bool(r->info().access & kAccessOnDemand), c.on_demand);
    EXPECT_EQ(r->info().length == SIZE_MAX, c.whole_space);
  }
}

TEST_F(CacheOdpTest, ExplicitPrefetchesRangesAboveTheThreshold) {
  Open("explicit");
  auto cache = Create("explicit", 64 * 1024);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto small = (*cache)->Get(buf_, kPage, kRW);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(Now().advise_calls, before_.advise_calls) << "below the threshold";
  auto big = (*cache)->Get(buf_ + 64 * kPage, 256 * kPage, kRW);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(Now().advise_calls, before_.advise_calls + 1) << "ibv_advise_mr prefetch";
}

}  // namespace
}  // namespace mrcache
