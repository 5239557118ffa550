// spaced_regions_fixture.h: a CacheImpl over the sim registrar at zero cost
// (no monitor, no mlock) and an area of one-page regions kSpacing apart,
// gets of a page at +64: the pattern of micro_bench's BM_MrcacheRandomHit.
// TearDown flushes and checks that no region is left and that registrations
// == deregistrations.
#ifndef TESTS_CACHE_SPACED_REGIONS_FIXTURE_H_
#define TESTS_CACHE_SPACED_REGIONS_FIXTURE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <memory>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "mrcache/registrars/sim_registrar.h"

namespace mrcache {
namespace testing {

class SpacedRegionsTest : public ::testing::Test {
 protected:
  static constexpr int kRW = kAccessLocalWrite | kAccessRemoteWrite;
  static constexpr size_t kSpacing = 64 * 1024;
  static constexpr size_t kMaxRegions = 10000;
  const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

  // Creates the cache; `adjust` may change the configuration first.
  template <typename Adjust>
  void CreateCache(Adjust adjust) {
    Config config;
    config.monitor = "none";
    config.sim_base_ns = config.sim_page_ns = 0;
    config.sim_mlock = false;  // the cache is under test, not pinning
    adjust(config);
    auto cache = CacheImpl::Create(config, MakeSimRegistrar(config));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }

  void SetUp() override {
    area_ = static_cast<char*>(mmap(nullptr, kMaxRegions * kSpacing, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    ASSERT_NE(area_, MAP_FAILED);
  }

  void TearDown() override {
    if (cache_) {
      EXPECT_TRUE(cache_->Flush().ok());
      const CacheStats s = cache_->stats();
      EXPECT_EQ(s.regions, 0u) << "no test holds a region at its end";
      EXPECT_EQ(s.registrations, s.deregistrations);
      cache_.reset();
    }
    if (area_ != nullptr) munmap(area_, kMaxRegions * kSpacing);
  }

  // The address the i-th region's gets start at (i < kMaxRegions).
  char* Spot(size_t i) const { return area_ + i * kSpacing + 64; }

  // Gets and puts a page at p.
  void GetPut(char* p) {
    auto r = cache_->Acquire(p, kPage, kRW);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(cache_->Put(*r).ok());
  }

  std::unique_ptr<CacheImpl> cache_;
  char* area_ = nullptr;
};

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_CACHE_SPACED_REGIONS_FIXTURE_H_
