// covering_hints_test.cc: the cache-wide hints of recent index answers
// (mrcache/core/covering_hints.h). A hint answers a get it covers with
// compatible access only while the index epoch it was filled at is current;
// the cache bumps the epoch whenever a region leaves the index, so a hint
// never names a region that left it. Observed through counters, never
// timing; every cache test ends with registrations == deregistrations.
#include "mrcache/core/covering_hints.h"

#include <thread>

#include <gtest/gtest.h>

#include "tests/cache/spaced_regions_fixture.h"

namespace mrcache {
namespace {

constexpr int kRW = kAccessLocalWrite | kAccessRemoteWrite;

// A region as the index holds one: its range and registered access.
void Describe(Region* r, uintptr_t start, uintptr_t end, int access) {
  r->start = start;
  r->end = end;
  r->reg.access = access;
}

TEST(CoveringHintsTest, AHintAnswersAGetItCoversAtTheSameEpoch) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kRW);
  hints.Fill(0x100040, &r, 7);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW, 7), &r);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kAccessLocalWrite | kAccessRemoteWrite, 7), &r);
}

TEST(CoveringHintsTest, AHintFilledAtAnEarlierEpochAnswersNothing) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kRW);
  hints.Fill(0x100040, &r, 7);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW, 8), nullptr);
}

TEST(CoveringHintsTest, AHintAnswersOnlyGetsItsRegionCovers) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kRW);
  hints.Fill(0x100040, &r, 7);
  EXPECT_EQ(hints.Find(0x100040, 0x110001, kRW, 7), nullptr) << "ends beyond the region";
}

TEST(CoveringHintsTest, AHintNeverGrantsOtherRemoteRights) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kAccessLocalWrite);
  hints.Fill(0x100040, &r, 7);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW, 7), nullptr) << "no remote write was registered";
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kAccessLocalWrite, 7), &r);
}

TEST(CoveringHintsTest, AnEmptyHintAnswersNothing) {
  CoveringHints hints(CoveringHints::kMinLines);
  EXPECT_EQ(hints.Find(0, 0x1000, 0, 0), nullptr) << "epoch 0 marks an empty hint, even asked at 0";
  CoveringHints none;
  EXPECT_EQ(none.lines(), 0u);
  EXPECT_EQ(none.Find(0x100040, 0x101040, kRW, 1), nullptr);
}

TEST(CoveringHintsTest, TheTableFollowsTheRegionCountWithinItsBounds) {
  EXPECT_EQ(CoveringHints::LinesFor(CoveringHints::kMinLines - 1), 0u);
  EXPECT_EQ(CoveringHints::LinesFor(CoveringHints::kMinLines), CoveringHints::kMinLines);
  EXPECT_EQ(CoveringHints::LinesFor(100000), 131072u);
  EXPECT_EQ(CoveringHints::LinesFor(100000000), CoveringHints::kMaxLines);
}

// In a cache: enough regions that it keeps a table of hints.
class CacheHintsTest : public testing::SpacedRegionsTest {
 protected:
  static constexpr size_t kRegions = CoveringHints::kMinLines;
  void SetUp() override {
    SpacedRegionsTest::SetUp();
    CreateCache([](Config& config) {
      config.max_merge_bytes = 0;
      config.bridge_bytes = 0;
    });
    for (size_t i = 0; i < kRegions; ++i) GetPut(Spot(i));
  }
  // A get and put of region i on a new thread (whose table is empty): the
  // index, or a hint, must answer it.
  void GetPutOnNewThread(size_t i) {
    std::thread([&] { GetPut(Spot(i)); }).join();
  }
};

TEST_F(CacheHintsTest, AGetAnsweredOnceIsAnsweredAgainWithoutARegistration) {
  GetPutOnNewThread(5);  // fills the hint
  const uint64_t registrations = cache_->stats().registrations;
  GetPutOnNewThread(5);
  EXPECT_EQ(cache_->stats().registrations, registrations);
}

TEST_F(CacheHintsTest, AHintNeverOutlivesItsRegion) {
  GetPutOnNewThread(5);  // the hint names region 5
  ASSERT_TRUE(cache_->Invalidate(Spot(5), kPage).ok());
  const uint64_t registrations = cache_->stats().registrations;
  GetPutOnNewThread(5);
  EXPECT_EQ(cache_->stats().registrations, registrations + 1)
      << "the invalidated region was answered from a hint";
}

}  // namespace
}  // namespace mrcache
