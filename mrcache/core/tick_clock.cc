// tick_clock.cc: which clock ticks are, and the rate measured once
// (tick_clock.h).
#include "mrcache/core/tick_clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "mrcache/core/tick_rate.h"

namespace mrcache {
namespace {

bool InvariantTsc() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // __get_cpuid is 0 where the CPU has no such leaf.
  if (__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

// Whether ticks are TSC ticks, and nanoseconds per tick, measured against
// steady_clock over kCalibrationNs (half a millisecond: the rate is then
// good to about 1e-4; tick_rate.h says how a preemption during it is kept
// out).
struct TickRate {
  static constexpr uint64_t kCalibrationNs = 500'000;
  static constexpr int kEndReadings = 5;
  bool tsc = InvariantTsc();
  double ns_per_tick = 1.0;
  TickRate() {
    if (!tsc) return;
    ns_per_tick = MeasureNsPerTick([] { return NowTicks(true); }, SteadyClockNs, kCalibrationNs,
                                   kEndReadings);
    if (ns_per_tick == 0) {
      tsc = false;  // a counter that does not advance: use the clock itself
      ns_per_tick = 1.0;
    }
  }
};

// The process's TickRate, measured by the first caller that finds none (a
// cache may be created by another library's static initializer). Not a
// function-local static: its guard would hold concurrent callers for the
// whole measurement, and a fork() meanwhile would leave the child's copy of
// the guard "in progress" forever, so that the child's first cache hung
// (tests/interpose/fork_test.cc, a child of a process busy in the shim).
// Concurrent first callers each measure; the first result stored is kept.
const TickRate& Rate() {
  static std::atomic<const TickRate*> rate{nullptr};  // constant-initialized: no guard
  const TickRate* kept = rate.load(std::memory_order_acquire);
  if (kept != nullptr) return *kept;
  const TickRate* mine = new TickRate;  // kept for the process's lifetime
  if (rate.compare_exchange_strong(kept, mine, std::memory_order_acq_rel)) return *mine;
  delete mine;
  return *kept;
}

}  // namespace

bool TickClockIsTsc() { return Rate().tsc; }

double NsPerTick() {
  const TickRate& rate = Rate();
  return rate.tsc ? rate.ns_per_tick : 1.0;
}

uint64_t TicksToNs(uint64_t ticks) {
  const TickRate& rate = Rate();
  if (!rate.tsc) return ticks;
  return static_cast<uint64_t>(static_cast<double>(ticks) * rate.ns_per_tick);
}

}  // namespace mrcache
