// registrar_costs_test.cc: the shim's "registrar time saved" estimate prices
// each served request by the measured cost of its own size class, and can
// only underestimate when it must fill a class in.
#include "interpose/registrar_costs.h"

#include <vector>

#include <gtest/gtest.h>

namespace mrcache_preload {
namespace {

constexpr size_t kPage = RegistrarCosts::kPageBytes;

TEST(RegistrarCosts, ClassesAreLog2OfPages) {
  EXPECT_EQ(RegistrarCosts::ClassOf(1), 0);
  EXPECT_EQ(RegistrarCosts::ClassOf(kPage), 0);
  EXPECT_EQ(RegistrarCosts::ClassOf(kPage + 1), 1);  // 2 pages
  EXPECT_EQ(RegistrarCosts::ClassOf(3 * kPage), 1);
  EXPECT_EQ(RegistrarCosts::ClassOf(4 * kPage), 2);
  EXPECT_EQ(RegistrarCosts::ClassOf(size_t{1} << 62), RegistrarCosts::kClasses - 1);
}

TEST(RegistrarCosts, RequestsArePricedAtTheirClassMeanRegisterPlusDeregister) {
  RegistrarCosts costs;
  costs.AddRegistration(kPage, 3000);
  costs.AddDeregistration(kPage, 1000);
  costs.AddRegistration(kPage, 5000);
  costs.AddDeregistration(kPage, 1000);
  for (int i = 0; i < 10; ++i) costs.AddRequest(100);
  const RegistrarCosts::Estimate e = costs.EstimateUncached();
  EXPECT_EQ(e.requests, 10u);
  EXPECT_EQ(e.measured_registrations, 2u);
  EXPECT_EQ(e.uncached_ns, 10u * 5000);
}

// The case that once printed "659.9 ms saved" for a run 20 ms faster: many
// small hits, and only large (bridged) registrations measured.
TEST(RegistrarCosts, SmallRequestsAreNotPricedAtTheCostOfLargeRegistrations) {
  RegistrarCosts costs;
  costs.AddRegistration(1024 * kPage, 1'000'000);  // one 4 MiB registration, 1 ms
  for (int i = 0; i < 1000; ++i) costs.AddRequest(kPage);
  const RegistrarCosts::Estimate e = costs.EstimateUncached();
  // Scaled down by the page ratio: 1 ms / 1024 per request, not 1 ms.
  EXPECT_EQ(e.uncached_ns, 1000u * 1'000'000 / 1024);
}

TEST(RegistrarCosts, LargerRequestsTakeTheNearestSmallerMeasuredClass) {
  RegistrarCosts costs;
  costs.AddRegistration(kPage, 2000);
  costs.AddRegistration(16 * kPage, 8000);
  costs.AddRequest(100 * kPage);  // class 6: nothing measured; class 4 is the nearest below
  EXPECT_EQ(costs.EstimateUncached().uncached_ns, 8000u);
}

TEST(RegistrarCosts, TheSecondRequestOfAClassAndEvery64thAfterAreSampled) {
  RegistrarCosts costs;
  std::vector<int> sampled;
  for (int i = 0; i < 200; ++i) {
    if (costs.AddRequest(kPage)) sampled.push_back(i);
  }
  EXPECT_EQ(sampled, (std::vector<int>{1, 65, 129, 193}));
  // Another class counts on its own.
  EXPECT_FALSE(costs.AddRequest(64 * kPage));
  EXPECT_TRUE(costs.AddRequest(64 * kPage));
}

// The cache's registrations are first-time ones (cold pages), dearer than the
// repeats it avoided: once a request was sampled, only samples price.
TEST(RegistrarCosts, SamplesAreUsedInsteadOfTheCachesFirstTimeRegistrations) {
  RegistrarCosts costs;
  costs.AddRegistration(kPage, 70'000);
  for (int i = 0; i < 10; ++i) costs.AddRequest(kPage);
  costs.AddSample(kPage, 10'000);
  const RegistrarCosts::Estimate e = costs.EstimateUncached();
  EXPECT_EQ(e.samples, 1u);
  EXPECT_EQ(e.uncached_ns, 10u * 10'000);
}

TEST(RegistrarCosts, NothingMeasuredPricesEverythingAtZero) {
  RegistrarCosts costs;
  costs.AddRequest(kPage);
  const RegistrarCosts::Estimate e = costs.EstimateUncached();
  EXPECT_EQ(e.requests, 1u);
  EXPECT_EQ(e.uncached_ns, 0u);
}

}  // namespace
}  // namespace mrcache_preload
