// registrar_time_test.cc: stats' registrar_ns and regions, which the miss
// path keeps without a clock_gettime per call (tick_clock.h) and
// without a counter of its own (regions).
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/registrars/sim_registrar.h"

namespace mrcache {
namespace {

constexpr size_t kPage = 4096;

class RegistrarTimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    area_ = static_cast<char*>(
        mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area_, MAP_FAILED);
  }
  void TearDown() override { munmap(area_, kPages * kPage); }

  // A cache over a sim registrar whose registrations spin `base_ns` (and
  // deregistrations half of it); nothing merges.
  std::unique_ptr<Cache> MakeCache(uint64_t base_ns) {
    Config config;
    config.registrar = "sim";
    config.sim_base_ns = base_ns;
    config.sim_page_ns = 0;
    config.monitor = "none";
    config.max_merge_bytes = 0;
    auto made = Cache::Create(config, MakeSimRegistrar(config));
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(*made) : nullptr;
  }

  // Gets and puts page i of the area (every other page: nothing adjoins).
  void GetAndPut(Cache& cache, size_t i) {
    auto region = cache.Acquire(area_ + 2 * i * kPage, kPage, kAccessLocalWrite);
    ASSERT_TRUE(region.ok()) << region.status();
    ASSERT_TRUE(cache.Put(*region).ok());
  }

  static constexpr size_t kPages = 16;
  char* area_ = nullptr;
};

// The sim registrar spins for its modelled cost and reports exactly what it
// spent (simulated_ns); registrar_ns must include all of it. (A lower bound
// only: the measured time also holds the calls' own work and preemption.)
TEST_F(RegistrarTimeTest, RegistrarNsCountsAtLeastTheTimeTheRegistrarSpent) {
  std::unique_ptr<Cache> cache = MakeCache(/*base_ns=*/2'000'000);
  ASSERT_NE(cache, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 4; ++i) GetAndPut(*cache, i);
  ASSERT_TRUE(cache->Flush().ok());
  const uint64_t elapsed =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  const auto sim = GetSimRegistrarStats(cache->registrar());
  ASSERT_TRUE(sim.has_value());
  EXPECT_EQ(sim->registrations, 4u);
  EXPECT_EQ(sim->deregistrations, 4u);
  // 4 registrations x 2 ms + 4 deregistrations x 1 ms. The clock's rate is
  // measured once, over half a millisecond; allow it 5% against steady_clock.
  ASSERT_EQ(sim->simulated_ns, 12'000'000u);
  const uint64_t registrar_ns = cache->stats().registrar_ns;
  EXPECT_GE(registrar_ns, sim->simulated_ns * 95 / 100);
  // Nanoseconds, not raw clock ticks: no more than the calls took in all.
  EXPECT_LE(registrar_ns, elapsed * 105 / 100);
}

TEST_F(RegistrarTimeTest, RegistrarNsGrowsWithEveryRegistrarCall) {
  std::unique_ptr<Cache> cache = MakeCache(/*base_ns=*/200'000);
  ASSERT_NE(cache, nullptr);
  GetAndPut(*cache, 0);
  const uint64_t after_register = cache->stats().registrar_ns;
  EXPECT_GE(after_register, 190'000u);
  GetAndPut(*cache, 0);  // a hit: no registrar call
  EXPECT_EQ(cache->stats().registrar_ns, after_register);
  ASSERT_TRUE(cache->Flush().ok());  // one deregistration, 100 us
  EXPECT_GE(cache->stats().registrar_ns, after_register + 95'000u);
}

// regions is the registrations still live: registered and not yet
// deregistered, whether cached, held or retired.
TEST_F(RegistrarTimeTest, RegionsAreTheRegistrationsNotYetDeregistered) {
  std::unique_ptr<Cache> cache = MakeCache(0);
  ASSERT_NE(cache, nullptr);
  auto held = cache->Acquire(area_, kPage, kAccessLocalWrite);
  ASSERT_TRUE(held.ok());
  for (size_t i = 1; i < 4; ++i) GetAndPut(*cache, i);
  CacheStats s = cache->stats();
  EXPECT_EQ(s.registrations, 4u);
  EXPECT_EQ(s.regions, 4u);
  ASSERT_TRUE(cache->Flush().ok());  // the three unused ones go
  s = cache->stats();
  EXPECT_EQ(s.deregistrations, 3u);
  EXPECT_EQ(s.regions, 1u);
  ASSERT_TRUE(cache->Put(*held).ok());
  ASSERT_TRUE(cache->Flush().ok());
  s = cache->stats();
  EXPECT_EQ(s.regions, 0u);
  EXPECT_EQ(s.registrations, s.deregistrations);
}

}  // namespace
}  // namespace mrcache
