// Replaying traces through the `none` and `ucx` configurations: counting,
// invalidation on free, the staleness oracle, and no leaks.
#include "bench/replay.h"

#include <memory>
#include <thread>

#include "bench/none_driver.h"
#include "bench/ucx_peer.h"
#include "gtest/gtest.h"
#include "tests/bench/test_registrar.h"

namespace mrbench {
namespace {

Trace Parse(absl::string_view text) {
  absl::StatusOr<Trace> t = ParseTrace(text, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace{};
}

// Two buffers transferred alternately, five times each.
const char kPingPong[] =
    "alloc 1 100000\nalloc 2 5000\n"
    "xfer 1 0 100000\nxfer 2 0 5000\nxfer 1 0 100000\nxfer 2 0 5000\nxfer 1 0 100000\n"
    "xfer 2 0 5000\nxfer 1 0 100000\nxfer 2 0 5000\nxfer 1 0 100000\nxfer 2 0 5000\n"
    "free 1\nfree 2\n";

UcxPeerSpec Spec(bool verify) {
  UcxPeerSpec spec;
  spec.make_registrar = []() -> absl::StatusOr<std::unique_ptr<mrcache::Registrar>> {
    return std::unique_ptr<mrcache::Registrar>(new TestRegistrar);
  };
  spec.max_regions = 16;
  spec.options.verify = verify;
  return spec;
}

TEST(ReplayNone, RegistersEveryTransferAndNeverHits) {
  auto counters = std::make_shared<RegistrarCounters>();
  auto test_registrar = std::make_unique<TestRegistrar>();
  TestRegistrar* raw = test_registrar.get();
  CountingRegistrar registrar(std::move(test_registrar), counters);
  NoneDriver driver(registrar);
  absl::StatusOr<ReplayResult> r = Replay(Parse(kPingPong), driver, *counters, {true, nullptr});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transfers, 10u);
  EXPECT_EQ(r->hits, 0u);
  EXPECT_EQ(r->registrations, 10u);
  EXPECT_EQ(r->stale, 0u);
  EXPECT_EQ(r->verified, 10u);
  EXPECT_EQ(raw->live(), 0u);
  EXPECT_GE(r->peak_pinned_bytes, 100000u);
  EXPECT_LT(r->peak_pinned_bytes, 100000u + 2 * 4096);
}

TEST(CountingRegistrar, DeregistrationsOnOtherThreadsCountAsBackgroundWork) {
  auto counters = std::make_shared<RegistrarCounters>();
  CountingRegistrar registrar(std::make_unique<TestRegistrar>(), counters);
  char buffer[2][4096];
  absl::StatusOr<mrcache::Registration> here = registrar.Register(buffer[0], 4096, 0);
  absl::StatusOr<mrcache::Registration> there = registrar.Register(buffer[1], 4096, 0);
  ASSERT_TRUE(here.ok() && there.ok());
  EXPECT_TRUE(registrar.Deregister(*here).ok());
  EXPECT_EQ(counters->background_deregistrations.load(), 0u);
  const uint64_t workload_ns = counters->registrar_ns.load();
  std::thread([&] { EXPECT_TRUE(registrar.Deregister(*there).ok()); }).join();
  EXPECT_EQ(counters->deregistrations.load(), 2u);
  EXPECT_EQ(counters->background_deregistrations.load(), 1u);
  EXPECT_EQ(counters->registrar_ns.load(), workload_ns);  // not the workload thread's time
}

TEST(ReplayNone, VerifyCountsStaleRegistrations) {
  auto counters = std::make_shared<RegistrarCounters>();
  auto test_registrar = std::make_unique<TestRegistrar>();
  test_registrar->MarkFutureStale();
  CountingRegistrar registrar(std::move(test_registrar), counters);
  NoneDriver driver(registrar);
  absl::StatusOr<ReplayResult> r = Replay(Parse(kPingPong), driver, *counters, {true, nullptr});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stale, 10u);
}

TEST(ReplayNone, ProgressIsReportedEvery1024Transfers) {
  std::string text = "alloc 1 64\n";
  for (int i = 0; i < 2048; ++i) text += "xfer 1 0 64\n";
  auto counters = std::make_shared<RegistrarCounters>();
  CountingRegistrar registrar(std::make_unique<TestRegistrar>(), counters);
  NoneDriver driver(registrar);
  std::vector<size_t> seen;
  absl::StatusOr<ReplayResult> r =
      Replay(Parse(text), driver, *counters, {false, [&](size_t done, size_t total) {
                                                EXPECT_EQ(total, 2048u);
                                                seen.push_back(done);
                                              }});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seen, (std::vector<size_t>{1024, 2048}));
}

TEST(ReplayUcx, ReusesRegistrationsInAChildProcess) {
  absl::StatusOr<ReplayResult> r = RunUcxPeer(Parse(kPingPong), Spec(true));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transfers, 10u);
  EXPECT_EQ(r->hits, 8u);
  EXPECT_EQ(r->registrations, 2u);
  EXPECT_EQ(r->stale, 0u);
}

TEST(ReplayUcx, FreeInvalidatesSoTheNextBufferRegistersAgain) {
  Trace t = Parse(
      "alloc 1 100000\nxfer 1 0 100000\nxfer 1 0 100000\nfree 1\n"
      "alloc 2 100000\nxfer 2 0 100000\nfree 2\n");
  absl::StatusOr<ReplayResult> r = RunUcxPeer(t, Spec(true));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits, 1u);
  EXPECT_EQ(r->registrations, 2u);
}

TEST(ReplayUcx, ChildErrorsComeBackWithTheirErrno) {
  UcxPeerSpec spec = Spec(false);
  spec.make_registrar = []() -> absl::StatusOr<std::unique_ptr<mrcache::Registrar>> {
    return mrcache::ErrnoStatus(ENODEV, "no such registrar");
  };
  absl::StatusOr<ReplayResult> r = RunUcxPeer(Parse(kPingPong), spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(mrcache::StatusToErrno(r.status()), ENODEV);
  EXPECT_EQ(r.status().message(), "ucx peer: no such registrar (No such device)");
}

TEST(ReplayUcx, RegistersWithTheUnionOfTheTraceAccess) {
  EXPECT_EQ(UnionAccess(Parse("alloc 1 10\nxfer 1 0 1 1\nxfer 1 0 1 5\n")), 5);
}

}  // namespace
}  // namespace mrbench
