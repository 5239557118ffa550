// region_limit_test.cc: config key max_region_bytes on the sim and uring
// registrars. No region the cache registers is longer: merging, bridging
// and alignment stop below it (and without it, the same gets do make
// longer regions); a longer request fails EINVAL, with a logged message
// naming the limit, and registers nothing. The registrar reports the lower
// of the key and its own limit (uring: 1 GiB per buffer).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/cache/region_limit_cases.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::kMiB;
using testing::LimitArea;
using testing::LimitProbe;
using testing::RegistrarCounters;

class RegionLimitTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (uring() && !UringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    ASSERT_NE(area_.base(), nullptr);
    config_.sim_base_ns = config_.sim_page_ns = 0;
  }

  void TearDown() override {
    cache_.reset();
    EXPECT_EQ(counters_->registrations.load(), counters_->deregistrations.load());
  }

  bool uring() const { return std::string(GetParam()) == "uring"; }

  Cache& cache() {
    if (!cache_) {
      std::unique_ptr<Registrar> inner;
      if (uring()) {
        auto made = MakeUringRegistrar(config_);
        EXPECT_TRUE(made.ok()) << made.status();
        inner = std::move(*made);
      } else {
        inner = MakeSimRegistrar(config_);
      }
      auto made =
          Cache::Create(config_, std::make_unique<CountingRegistrar>(std::move(inner), counters_));
      EXPECT_TRUE(made.ok()) << made.status();
      cache_ = std::move(*made);
    }
    return *cache_;
  }

  Config config_;
  std::shared_ptr<RegistrarCounters> counters_ = std::make_shared<RegistrarCounters>();
  LimitArea area_;
  std::unique_ptr<Cache> cache_;
};

TEST_P(RegionLimitTest, TheRegistrarReportsTheLowerOfTheKeyAndItsOwnLimit) {
  config_.max_region_bytes = kMiB;
  EXPECT_EQ(cache().registrar().max_region_bytes(), kMiB);
}

TEST_P(RegionLimitTest, WithoutTheKeyTheRegistrarsOwnLimitApplies) {
  EXPECT_EQ(cache().registrar().max_region_bytes(), uring() ? kUringMaxBufferBytes : 0u);
}

TEST_P(RegionLimitTest, MergingNeverMakesARegionAboveTheLimit) {
  config_.max_region_bytes = kMiB;
  LimitProbe probe(counters_.get());
  testing::GetsThatWouldMergePastOneMiB(cache(), area_, kAccessLocalWrite);
  EXPECT_LE(probe.longest(), kMiB);
  EXPECT_TRUE(probe.refusals().empty()) << probe.refusals().front();
}

TEST_P(RegionLimitTest, BridgingNeverMakesARegionAboveTheLimit) {
  config_.monitor = testing::CompleteMonitor();
  if (config_.monitor.empty()) GTEST_SKIP() << "no monitor that bridging needs in this build";
  config_.max_region_bytes = kMiB;
  LimitProbe probe(counters_.get());
  testing::GetsThatWouldBridgePastOneMiB(cache(), area_);
  EXPECT_LE(probe.longest(), kMiB);
  EXPECT_GT(probe.longest(), 4096u) << "nothing bridged below the limit either";
  EXPECT_TRUE(probe.refusals().empty()) << probe.refusals().front();
}

TEST_P(RegionLimitTest, AlignmentNeverMakesARegionAboveTheLimit) {
  config_.alignment = 2 * kMiB;
  config_.max_region_bytes = kMiB;
  LimitProbe probe(counters_.get());
  EXPECT_EQ(testing::GetAndPut(cache(), area_.base() + kMiB, 100, kAccessLocalWrite),
            static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  EXPECT_LE(probe.longest(), kMiB);
}

TEST_P(RegionLimitTest, ARequestAboveTheLimitIsEinvalNamingIt) {
  config_.max_region_bytes = kMiB;
  LimitProbe probe(counters_.get());
  auto region = cache().Get(area_.base() + kMiB, 2 * kMiB, kAccessLocalWrite);
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(StatusToErrno(region.status()), EINVAL);
  EXPECT_NE(region.status().message().find("max_region_bytes of 1048576 bytes"), std::string::npos)
      << region.status();
  ASSERT_FALSE(probe.refusals().empty()) << "the refusal was not logged";
  EXPECT_NE(probe.refusals().back().find("max_region_bytes"), std::string::npos)
      << probe.refusals().back();
  EXPECT_EQ(counters_->registrations.load(), 0) << "registered something else instead";
}

TEST_P(RegionLimitTest, ARequestOfExactlyTheLimitSucceeds) {
  config_.max_region_bytes = kMiB;
  EXPECT_EQ(testing::GetAndPut(cache(), area_.base() + kMiB, kMiB, kAccessLocalWrite), kMiB);
}

// The same gets without the limit, on sim (nothing pinned, so no pin budget
// caps them instead): they do make regions above 1 MiB, so the tests above
// test something.
using RegionLimitControl = RegionLimitTest;

TEST_P(RegionLimitControl, WithoutTheLimitTheSameGetsMergePastIt) {
  LimitProbe probe(counters_.get());
  testing::GetsThatWouldMergePastOneMiB(cache(), area_, kAccessLocalWrite);
  EXPECT_GT(probe.longest(), kMiB) << "the merge case no longer merges: it tests nothing";
}

TEST_P(RegionLimitControl, WithoutTheLimitTheSameGetsBridgePastIt) {
  config_.monitor = testing::CompleteMonitor();
  if (config_.monitor.empty()) GTEST_SKIP() << "no monitor that bridging needs in this build";
  LimitProbe probe(counters_.get());
  testing::GetsThatWouldBridgePastOneMiB(cache(), area_);
  EXPECT_GT(probe.longest(), kMiB) << "the bridge case no longer bridges: it tests nothing";
}

TEST_P(RegionLimitControl, WithoutTheLimitAlignmentWidensPastIt) {
  config_.alignment = 2 * kMiB;
  EXPECT_EQ(testing::GetAndPut(cache(), area_.base() + kMiB, 100, kAccessLocalWrite), 2 * kMiB);
}

INSTANTIATE_TEST_SUITE_P(Sim, RegionLimitControl, ::testing::Values("sim"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(Registrars, RegionLimitTest, ::testing::Values("sim", "uring"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace mrcache
