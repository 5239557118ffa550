// covering_hints_test.cc: the cache-wide hints of recent index answers
// (mrcache/core/covering_hints.h). A hint answers a get it covers with
// compatible access until its region is voided: a region leaving the index
// voids its own hints, or, if it is too large to sweep, every hint (a new
// epoch), so a hint never names a region that left it. Observed through
// counters, never timing; every cache test ends with registrations ==
// deregistrations.
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

TEST(CoveringHintsTest, AHintAnswersAGetItCovers) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kRW);
  hints.Fill(0x100040, &r);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW), &r);
  uintptr_t start = 0, end = 0;
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW, &start, &end), &r);
  EXPECT_EQ(start, r.start) << "the region's range comes with it";
  EXPECT_EQ(end, r.end);
}

TEST(CoveringHintsTest, AHintAnswersOnlyGetsItsRegionCovers) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kRW);
  hints.Fill(0x100040, &r);
  EXPECT_EQ(hints.Find(0x100040, 0x110001, kRW), nullptr) << "ends beyond the region";
}

TEST(CoveringHintsTest, AHintNeverGrantsOtherRemoteRights) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kAccessLocalWrite);
  hints.Fill(0x100040, &r);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW), nullptr) << "no remote write was registered";
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kAccessLocalWrite), &r);
}

TEST(CoveringHintsTest, AnEmptyTableAnswersNothing) {
  CoveringHints hints(CoveringHints::kMinLines);
  EXPECT_EQ(hints.Find(0, 0x1000, 0), nullptr);
  CoveringHints none;
  EXPECT_EQ(none.lines(), 0u);
  EXPECT_EQ(none.Find(0x100040, 0x101040, kRW), nullptr);
}

TEST(CoveringHintsTest, VoidingARegionVoidsItsHintsOnEveryPage) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000, 0x110000, kRW);
  hints.Fill(0x100040, &r);
  hints.Fill(0x10f000, &r);  // a get starting on its last page
  hints.Void(&r);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW), nullptr);
  EXPECT_EQ(hints.Find(0x10f000, 0x110000, kRW), nullptr);
}

TEST(CoveringHintsTest, VoidingARegionLeavesOtherRegionsHints) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region gone, kept;
  Describe(&gone, 0x100000, 0x110000, kRW);
  Describe(&kept, 0x110000, 0x120000, kRW);
  hints.Fill(0x100040, &gone);
  hints.Fill(0x110040, &kept);
  hints.Void(&gone);
  EXPECT_EQ(hints.Find(0x110040, 0x111040, kRW), &kept);
}

TEST(CoveringHintsTest, VoidingARegionTooLargeToSweepVoidsEveryHint) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region large, other;
  Describe(&large, 0x100000, 0x100000 + (CoveringHints::kMaxVoidPages + 1) * 4096, kRW);
  Describe(&other, 0x10000000, 0x10010000, kRW);
  hints.Fill(0x100040, &large);
  hints.Fill(0x10000040, &other);
  hints.Void(&large);
  EXPECT_EQ(hints.Find(0x100040, 0x101040, kRW), nullptr);
  EXPECT_EQ(hints.Find(0x10000040, 0x10001040, kRW), nullptr) << "a new epoch voids them all";
  hints.Fill(0x10000040, &other);
  EXPECT_EQ(hints.Find(0x10000040, 0x10001040, kRW), &other) << "filled again at the new epoch";
}

TEST(CoveringHintsTest, FourRegionsOnOnePageAreAllAnswered) {
  // Regions of other rights over the same page: the page's four hints hold
  // one each.
  CoveringHints hints(CoveringHints::kMinLines);
  Region r[4];
  const int access[4] = {kAccessLocalWrite, kAccessLocalWrite | kAccessRemoteRead,
                         kAccessLocalWrite | kAccessRemoteWrite,
                         kAccessLocalWrite | kAccessRemoteAtomic};
  for (int i = 0; i < 4; ++i) {
    Describe(&r[i], 0x100000, 0x110000, access[i]);
    hints.Fill(0x100040, &r[i]);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(hints.Find(0x100040, 0x101040, access[i]), &r[i]) << "region " << i;
  }
}

TEST(CoveringHintsTest, ARegionOf4GiBOrMoreGetsNoHint) {
  CoveringHints hints(CoveringHints::kMinLines);
  Region r;
  Describe(&r, 0x100000000, 0x200000000, kRW);
  hints.Fill(0x100000040, &r);
  EXPECT_EQ(hints.Find(0x100000040, 0x100001040, kRW), nullptr) << "the index answers it";
}

TEST(CoveringHintsTest, TheTableFollowsTheRegionCountWithinItsBounds) {
  EXPECT_EQ(CoveringHints::LinesFor(CoveringHints::kMinLines - 1), 0u);
  EXPECT_EQ(CoveringHints::LinesFor(CoveringHints::kMinLines), CoveringHints::kMinLines);
  EXPECT_EQ(CoveringHints::LinesFor(100000), 131072u);
  EXPECT_EQ(CoveringHints::LinesFor(100000000), CoveringHints::kMaxLines);
}

TEST(CoveringHintsTest, AnIndexOutgrowsItsLinesExactlyWhenLinesForAsksForMore) {
  size_t lines = 0;
  for (int step = 0; step < 64 && CoveringHints::RegionsToOutgrow(lines) != SIZE_MAX; ++step) {
    const size_t outgrow = CoveringHints::RegionsToOutgrow(lines);
    EXPECT_EQ(CoveringHints::LinesFor(outgrow - 1), lines) << "lines " << lines;
    ASSERT_GT(CoveringHints::LinesFor(outgrow), lines) << "lines " << lines;
    lines = CoveringHints::LinesFor(outgrow);
  }
  EXPECT_EQ(lines, CoveringHints::kMaxLines);
  EXPECT_EQ(CoveringHints::RegionsToOutgrow(lines), SIZE_MAX);
  EXPECT_EQ(CoveringHints::LinesFor(SIZE_MAX / 2), lines) << "no more past kMaxLines";
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

TEST_F(CacheHintsTest, ARegionTooLargeToSweepNeverOutlivesItsHintsEither) {
  // Beyond the regions the fixture made: 128 pages, more than a sweep takes.
  char* big = Spot(kRegions + 1);
  const size_t length = 2 * CoveringHints::kMaxVoidPages * 4096;
  ASSERT_LE(kRegions + 1 + length / kSpacing + 1, kMaxRegions);
  std::thread([&] {
    auto r = cache_->Acquire(big, length, kRW);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(cache_->Put(*r).ok());
  }).join();
  char* inside = big + length / 2;
  GetPutOnNewThread(0);  // a hint of another region, filled before the removal
  std::thread([&] { GetPut(inside); }).join();  // the hint names the big region
  ASSERT_TRUE(cache_->Invalidate(big, length).ok());
  const uint64_t registrations = cache_->stats().registrations;
  std::thread([&] { GetPut(inside); }).join();
  EXPECT_EQ(cache_->stats().registrations, registrations + 1)
      << "the invalidated region was answered from a hint";
  GetPutOnNewThread(0);
  EXPECT_EQ(cache_->stats().registrations, registrations + 1) << "region 0 is still cached";
}

TEST_F(CacheHintsTest, ARemovalLeavesOtherRegionsAnsweredWithoutARegistration) {
  GetPutOnNewThread(5);
  GetPutOnNewThread(6);
  ASSERT_TRUE(cache_->Invalidate(Spot(5), kPage).ok());
  const uint64_t registrations = cache_->stats().registrations;
  GetPutOnNewThread(6);
  EXPECT_EQ(cache_->stats().registrations, registrations);
}

}  // namespace
}  // namespace mrcache
