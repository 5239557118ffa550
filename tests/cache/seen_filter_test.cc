// seen_filter_test.cc: SeenFilter (mrcache/core/seen_filter.h) remembers a
// key for at least one window of calls and at most two, and rounds its size
// to a power of two.
#include "mrcache/core/seen_filter.h"

#include <gtest/gtest.h>

namespace mrcache {
namespace {

TEST(SeenFilterTest, AKeyIsNotSeenTheFirstTime) {
  SeenFilter f(1024, 16);
  EXPECT_FALSE(f.TestAndSet(42));
}

TEST(SeenFilterTest, AKeyIsSeenWithinAWindowOfCalls) {
  SeenFilter f(1 << 16, 64);
  EXPECT_FALSE(f.TestAndSet(42));
  // 62 other keys and 42 again: 64 calls, within one window.
  for (uint64_t k = 1000; k < 1062; ++k) f.TestAndSet(k);
  EXPECT_TRUE(f.TestAndSet(42));
}

TEST(SeenFilterTest, AKeyIsSeenAcrossOneRotation) {
  SeenFilter f(1 << 16, 64);
  for (uint64_t k = 1000; k < 1063; ++k) f.TestAndSet(k);
  EXPECT_FALSE(f.TestAndSet(42));  // the 64th call: the filter rotates after it
  for (uint64_t k = 2000; k < 2063; ++k) f.TestAndSet(k);
  EXPECT_TRUE(f.TestAndSet(42)) << "the previous bitset still has it";
}

TEST(SeenFilterTest, AKeyIsForgottenAfterTwoWindows) {
  SeenFilter f(1 << 16, 64);
  EXPECT_FALSE(f.TestAndSet(42));
  for (uint64_t k = 1000; k < 1000 + 2 * 64; ++k) f.TestAndSet(k);
  EXPECT_FALSE(f.TestAndSet(42));
}

TEST(SeenFilterTest, SizeIsAPowerOfTwoOfAtLeast64Bits) {
  EXPECT_EQ(SeenFilter(1, 1).bits(), 64u);
  EXPECT_EQ(SeenFilter(1000, 1).bits(), 1024u);
  EXPECT_EQ(SeenFilter(4096, 1).bits(), 4096u);
  EXPECT_EQ(SeenFilter(64, 0).window(), 1u);
}

}  // namespace
}  // namespace mrcache
