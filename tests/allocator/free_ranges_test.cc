// FreeRanges (allocator/free_ranges.h): best fit, coalescing within one owner
// only, alignment, and removal of a whole empty chunk.
#include "allocator/free_ranges.h"

#include "gtest/gtest.h"

namespace mrcache {
namespace {

constexpr size_t kPage = 4096;
const int kChunkA = 0, kChunkB = 0;
const void* const a = &kChunkA;
const void* const b = &kChunkB;

TEST(FreeRangesTest, TakeIsBestFitThenLowestAddress) {
  FreeRanges ranges;
  ranges.Add(0x100000, 8 * kPage, a);
  ranges.Add(0x200000, 2 * kPage, a);
  ranges.Add(0x300000, 2 * kPage, b);
  FreeRanges::Taken t = ranges.Take(2 * kPage, kPage);
  EXPECT_EQ(t.start, 0x200000u);
  EXPECT_EQ(t.owner, a);
  t = ranges.Take(kPage, kPage);
  EXPECT_EQ(t.start, 0x300000u) << "the smallest range that fits";
  EXPECT_EQ(t.owner, b);
  EXPECT_EQ(ranges.free_bytes(), 9 * kPage);
}

TEST(FreeRangesTest, NothingFitsGivesNoOwner) {
  FreeRanges ranges;
  ranges.Add(0x100000, 2 * kPage, a);
  EXPECT_EQ(ranges.Take(3 * kPage, kPage).owner, nullptr);
  EXPECT_EQ(ranges.free_bytes(), 2 * kPage);
}

TEST(FreeRangesTest, NeighboursOfOneOwnerMergeBackIntoOneRange) {
  FreeRanges ranges;
  ranges.Add(0x100000, 4 * kPage, a);
  const uintptr_t x = ranges.Take(kPage, kPage).start;
  const uintptr_t y = ranges.Take(kPage, kPage).start;
  const uintptr_t z = ranges.Take(kPage, kPage).start;
  EXPECT_EQ(ranges.ranges(), 1u);
  ranges.Add(y, kPage, a);
  EXPECT_EQ(ranges.ranges(), 2u);
  ranges.Add(x, kPage, a);
  ranges.Add(z, kPage, a);
  EXPECT_EQ(ranges.ranges(), 1u);
  EXPECT_TRUE(ranges.Remove(0x100000, 4 * kPage)) << "one range: the whole chunk";
  EXPECT_EQ(ranges.free_bytes(), 0u);
}

TEST(FreeRangesTest, TouchingRangesOfDifferentOwnersNeverMerge) {
  FreeRanges ranges;
  ranges.Add(0x100000, kPage, a);
  ranges.Add(0x101000, kPage, b);
  EXPECT_EQ(ranges.ranges(), 2u);
  EXPECT_EQ(ranges.Take(2 * kPage, kPage).owner, nullptr);
}

TEST(FreeRangesTest, AlignedTakeLeavesTheHeadAndTailFree) {
  FreeRanges ranges;
  ranges.Add(0x101000, 64 * kPage, a);
  FreeRanges::Taken t = ranges.Take(16 * kPage, 16 * kPage);
  EXPECT_EQ(t.start, 0x110000u);
  EXPECT_EQ(ranges.free_bytes(), 48 * kPage);
  EXPECT_EQ(ranges.ranges(), 2u);
}

TEST(FreeRangesTest, RemoveNeedsTheExactRange) {
  FreeRanges ranges;
  ranges.Add(0x100000, 4 * kPage, a);
  EXPECT_FALSE(ranges.Remove(0x100000, 2 * kPage));
  EXPECT_FALSE(ranges.Remove(0x101000, 3 * kPage));
  EXPECT_TRUE(ranges.Remove(0x100000, 4 * kPage));
}

}  // namespace
}  // namespace mrcache
