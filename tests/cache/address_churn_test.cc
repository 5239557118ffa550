// address_churn_test.cc: the verdict on whether cached regions keep dying by
// invalidation (mrcache/core/address_churn.h), from the cache's running
// counts of misses and of regions invalidated.
#include "mrcache/core/address_churn.h"

#include <gtest/gtest.h>

namespace mrcache {
namespace {

constexpr uint64_t kWindow = AddressChurn::kWindowMisses;
constexpr uint64_t kDeathsThatChurn = kWindow / AddressChurn::kMissesPerDeath;

TEST(AddressChurnTest, ChurningUntilTheFirstWindowEnds) {
  AddressChurn churn;
  EXPECT_TRUE(churn.Churning(0, 0));
  EXPECT_TRUE(churn.Churning(kWindow - 1, 0)) << "no evidence yet";
}

TEST(AddressChurnTest, AWindowWithoutDeathsIsQuiet) {
  AddressChurn churn;
  EXPECT_FALSE(churn.Churning(kWindow, 0));
}

TEST(AddressChurnTest, OneDeathPerKMissesPerDeathMissesIsChurning) {
  AddressChurn at_the_rate;
  EXPECT_TRUE(at_the_rate.Churning(kWindow, kDeathsThatChurn));
  AddressChurn below_it;
  EXPECT_FALSE(below_it.Churning(kWindow, kDeathsThatChurn - 1));
}

TEST(AddressChurnTest, TheVerdictHoldsUntilTheNextWindowEnds) {
  AddressChurn churn;
  ASSERT_FALSE(churn.Churning(kWindow, 0));
  // Deaths within the next window change nothing before it ends.
  EXPECT_FALSE(churn.Churning(2 * kWindow - 1, kWindow));
  EXPECT_TRUE(churn.Churning(2 * kWindow, kWindow));
}

TEST(AddressChurnTest, EachWindowCountsOnlyItsOwnDeaths) {
  AddressChurn churn;
  ASSERT_TRUE(churn.Churning(kWindow, kWindow)) << "every miss's region died";
  EXPECT_FALSE(churn.Churning(2 * kWindow, kWindow)) << "none died since";
}

TEST(AddressChurnTest, AWindowAskedLateSpansEveryMissSinceTheLastVerdict) {
  AddressChurn churn;
  // Three windows' misses with the deaths of one: the rate is a third.
  EXPECT_FALSE(churn.Churning(3 * kWindow, kDeathsThatChurn));
  AddressChurn dense;
  EXPECT_TRUE(dense.Churning(3 * kWindow, 3 * kDeathsThatChurn));
}

}  // namespace
}  // namespace mrcache
