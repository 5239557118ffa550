// address_heat_test.cc: mrcache::AddressHeat (mrcache/core/address_heat.h),
// where the cache saw invalidations or failed widenings lately: a mark is
// recent for `window` misses, small and large queries see small marks, a
// block's mark answers for the block, and no call reads or writes more than
// a few levels' worth of stamps, however large the range; answers depend on
// addresses modulo 64 GiB only.
#include "mrcache/core/address_heat.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace mrcache {
namespace {

constexpr uintptr_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
constexpr uint64_t kWindow = 4096;
// 64 GiB into the address space, aligned to every granule.
constexpr uintptr_t kBase = 64 * kGiB;

TEST(AddressHeatTest, NothingIsRecentBeforeAMark) {
  AddressHeat heat;
  EXPECT_FALSE(heat.Recent(kBase, kBase + 4 * kKiB, 100, kWindow));
  EXPECT_FALSE(heat.Recent(kBase, kBase + 128 * kMiB, 100, kWindow));
}

TEST(AddressHeatTest, AMarkIsRecentForTheWindowThenNot) {
  AddressHeat heat;
  heat.Mark(kBase, kBase + 4 * kKiB, 1000);
  EXPECT_TRUE(heat.Recent(kBase, kBase + 4 * kKiB, 1000, kWindow));
  EXPECT_TRUE(heat.Recent(kBase, kBase + 4 * kKiB, 1000 + kWindow - 1, kWindow));
  EXPECT_FALSE(heat.Recent(kBase, kBase + 4 * kKiB, 1000 + kWindow, kWindow));
}

TEST(AddressHeatTest, ABlockQuerySeesASmallMarkInsideIt) {
  AddressHeat heat;
  heat.Mark(kBase + 37 * kMiB, kBase + 37 * kMiB + 4 * kKiB, 10);
  EXPECT_TRUE(heat.Recent(kBase, kBase + 128 * kMiB, 20, kWindow));  // judged at 2 MiB
  EXPECT_TRUE(heat.Recent(kBase, kBase + 8 * kGiB, 20, kWindow));    // judged at 128 MiB
}

TEST(AddressHeatTest, ABlockMarkAnswersForTheBlock) {
  AddressHeat heat;
  heat.Mark(kBase, kBase + 128 * kMiB, 10);
  EXPECT_TRUE(heat.Recent(kBase, kBase + 128 * kMiB, 20, kWindow));
  EXPECT_TRUE(heat.Recent(kBase + 64 * kMiB, kBase + 66 * kMiB, 20, kWindow));
}

TEST(AddressHeatTest, AMarkElsewhereIsNotRecentHere) {
  AddressHeat heat;
  heat.Mark(kBase, kBase + 4 * kKiB, 10);
  // A different 64 KiB granule (and 2 MiB, and 128 MiB one), far away.
  const uintptr_t far = kBase + 3 * kGiB + 5 * 128 * kMiB;
  EXPECT_FALSE(heat.Recent(far, far + 4 * kKiB, 20, kWindow));
  EXPECT_FALSE(heat.Recent(far, far + 128 * kMiB, 20, kWindow));
}

TEST(AddressHeatTest, TheWholeAddressSpaceIsOneQuery) {
  AddressHeat heat;
  EXPECT_FALSE(heat.Recent(0, UINTPTR_MAX, 20, kWindow));
  heat.Mark(kBase, kBase + 4 * kKiB, 10);
  EXPECT_TRUE(heat.Recent(0, UINTPTR_MAX, 20, kWindow));
  heat.Mark(0, UINTPTR_MAX, 30);
  EXPECT_TRUE(heat.Recent(UINTPTR_MAX - 4 * kKiB, UINTPTR_MAX, 40, kWindow));
}

TEST(AddressHeatTest, AnswersDependOnTheAddressModulo64GiBOnly) {
  // The same marks and queries in two layouts 7 x 64 GiB + 64 GiB apart (as
  // two processes' heaps may lie, or a recording and its replay): every
  // answer is the same, collisions included.
  constexpr uintptr_t kShift = 8 * 64 * kGiB;
  AddressHeat here, there;
  uint64_t x = 12345;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  for (int i = 0; i < 600; ++i) {
    const uintptr_t start = kBase + (next() >> 30) % (4 * kGiB);
    const uintptr_t length = 4 * kKiB + (next() >> 40) % (3 * kMiB);
    here.Mark(start, start + length, 10);
    there.Mark(start + kShift, start + kShift + length, 10);
  }
  int recent = 0;
  for (int i = 0; i < 4000; ++i) {
    const uintptr_t start = (next() >> 20) % (1024 * kGiB);
    const uintptr_t length = 4 * kKiB + (next() >> 40) % (256 * kMiB);
    const bool answer = here.Recent(start, start + length, 20, kWindow);
    ASSERT_EQ(answer, there.Recent(start + kShift, start + kShift + length, 20, kWindow))
        << "query " << i << " at 0x" << std::hex << start;
    recent += answer;
  }
  EXPECT_GT(recent, 0);     // some queries hit marks or collide...
  EXPECT_LT(recent, 4000);  // ...and some do not
}

TEST(AddressHeatTest, RangesA64GiBMultipleApartShareTheirStamps) {
  AddressHeat heat;
  heat.Mark(kBase, kBase + 4 * kKiB, 10);
  EXPECT_TRUE(heat.Recent(kBase + 64 * kGiB, kBase + 64 * kGiB + 4 * kKiB, 20, kWindow));
  EXPECT_TRUE(heat.Recent(kBase + 3 * 64 * kGiB, kBase + 3 * 64 * kGiB + 4 * kKiB, 20, kWindow));
}

TEST(AddressHeatTest, EmptyRangesAreNeitherMarkedNorRecent) {
  AddressHeat heat;
  heat.Mark(kBase, kBase, 10);
  EXPECT_FALSE(heat.Recent(kBase, kBase + 4 * kKiB, 20, kWindow));
  EXPECT_FALSE(heat.Recent(kBase, kBase, 20, kWindow));
}

}  // namespace
}  // namespace mrcache
