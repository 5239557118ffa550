// tick_rate_test.cc: MeasureNsPerTick (mrcache/core/tick_rate.h) finds a
// counter's rate against a clock, and a preemption between two reads at
// either end of the measurement does not skew it. Runs on fake clocks: one
// true time that every read advances, the clock reading it in nanoseconds
// and the counter in 2.5 ticks per nanosecond, and a "preemption" that moves
// the true time on by 4 ms before a chosen read.
#include "mrcache/core/tick_rate.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace mrcache {
namespace {

constexpr double kTicksPerNs = 2.5;
constexpr uint64_t kReadNs = 20;          // every read takes this long
constexpr uint64_t kSliceNs = 4'000'000;  // a time slice another thread ran
constexpr uint64_t kSpanNs = 500'000;

// The fake machine (one test at a time uses it).
struct FakeTime {
  uint64_t now_ns = 1'000'000'000;
  uint64_t reads = 0;
  uint64_t preempt_before_read = 0;  // 0: never
  bool counter_stopped = false;
  uint64_t Advance() {
    ++reads;
    if (reads == preempt_before_read) now_ns += kSliceNs;
    now_ns += kReadNs;
    return now_ns;
  }
};
FakeTime g_time;

uint64_t FakeTicks() {
  const uint64_t t = g_time.Advance();
  return g_time.counter_stopped ? 12345 : static_cast<uint64_t>(t * kTicksPerNs);
}
uint64_t FakeNs() { return g_time.Advance(); }

// The number of reads a measurement makes: 3 per sandwich at each end, and
// the clock reads of the wait between them.
uint64_t ReadsOfOneMeasurement(int readings) {
  g_time = FakeTime{};
  MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, readings);
  return g_time.reads;
}

TEST(TickRateTest, FindsTheCountersRate) {
  g_time = FakeTime{};
  EXPECT_NEAR(MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, 5), 1 / kTicksPerNs, 1e-6);
}

TEST(TickRateTest, APreemptionInsideTheLastSandwichIsLeftOut) {
  const uint64_t reads = ReadsOfOneMeasurement(5);
  // Every read of the last five sandwiches in turn: between the clock's read
  // and the counter's after it is where a single reading would have been
  // skewed by the whole slice.
  for (uint64_t read = reads - 14; read <= reads; ++read) {
    g_time = FakeTime{};
    g_time.preempt_before_read = read;
    EXPECT_NEAR(MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, 5), 1 / kTicksPerNs, 1e-6)
        << "preempted before read " << read << " of " << reads;
  }
}

TEST(TickRateTest, APreemptionInsideTheFirstSandwichesIsLeftOut) {
  for (uint64_t read = 1; read <= 15; ++read) {
    g_time = FakeTime{};
    g_time.preempt_before_read = read;
    EXPECT_NEAR(MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, 5), 1 / kTicksPerNs, 1e-6)
        << "preempted before read " << read;
  }
}

TEST(TickRateTest, WithOneReadingAPreemptionSkewsTheRate) {
  // What the sandwiches are for: one reading at each end, preempted between
  // the end's clock read and its counter read, takes the slice as ticks the
  // clock did not see.
  const uint64_t reads = ReadsOfOneMeasurement(1);
  g_time = FakeTime{};
  g_time.preempt_before_read = reads;  // the last counter read
  const double rate = MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, 1);
  EXPECT_LT(rate, 0.5 / kTicksPerNs) << "the 4 ms slice against a 0.5 ms measurement";
}

TEST(TickRateTest, ACounterThatDoesNotAdvanceGivesZero) {
  g_time = FakeTime{};
  g_time.counter_stopped = true;
  EXPECT_EQ(MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, 5), 0.0);
}

TEST(TickRateTest, FewerThanOneReadingIsTakenAsOne) {
  g_time = FakeTime{};
  EXPECT_NEAR(MeasureNsPerTick(FakeTicks, FakeNs, kSpanNs, 0), 1 / kTicksPerNs, 1e-6);
}

}  // namespace
}  // namespace mrcache
