// tick_clock.h: the clock registrar time (stats' registrar_ns) and the
// sampled latencies are counted in.
//
// Contract. Ticks come from the cheapest clock that runs at a constant rate:
// the x86 time-stamp counter where the CPU says it is invariant (CPUID
// 0x80000007, EDX bit 8: constant rate in every P- and C-state), else
// steady_clock's nanoseconds. A miss reads it four times (register,
// deregister); the TSC read costs about a third of a clock_gettime
// (bench/RESULTS.md). Ticks become nanoseconds when they are read out, at one
// rate measured once per process (TicksToNs), so that a sum of ticks is a
// function of the calls it timed: it never moves without one.
//
// Thread-safe; no lock. The rate is measured by the first caller that finds
// none (TickClockIsTsc or TicksToNs), over half a millisecond.
#ifndef MRCACHE_CORE_TICK_CLOCK_H_
#define MRCACHE_CORE_TICK_CLOCK_H_

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>

namespace mrcache {

// Whether ticks are TSC ticks in this process. A cache keeps the answer, so
// that its reads of NowTicks do not check that the rate is measured.
bool TickClockIsTsc();

// steady_clock's nanoseconds.
inline uint64_t SteadyClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The current tick; `tsc`: TickClockIsTsc().
inline uint64_t NowTicks(bool tsc) {
#if defined(__x86_64__) || defined(__i386__)
  if (tsc) return __rdtsc();
#else
  (void)tsc;
#endif
  return SteadyClockNs();
}

// Adds the ticks since t0 to `sum` (none if the thread moved to a CPU whose
// counter reads behind) and returns them (0 then).
inline uint64_t AddTicksSince(std::atomic<uint64_t>& sum, uint64_t t0, bool tsc) {
  const uint64_t t1 = NowTicks(tsc);
  // Expected: GCC otherwise places the add out of line, two taken jumps on
  // every registrar call (bench/RESULTS.md, "Code after the registrar's
  // system call").
  if (__builtin_expect(t1 > t0, 1)) {
    sum.fetch_add(t1 - t0, std::memory_order_relaxed);
    return t1 - t0;
  }
  return 0;
}

// Nanoseconds in `ticks` of NowTicks().
uint64_t TicksToNs(uint64_t ticks);

// Nanoseconds per NowTicks() tick (1 when ticks are steady_clock's
// nanoseconds): kept by a caller that converts on a hot path, where
// TicksToNs's look-up of the process's rate would cost a call.
double NsPerTick();

// TicksToNs at a rate the caller kept (NsPerTick). Signed conversions are one
// instruction each; a latency is far below 2^63 ticks or nanoseconds.
inline uint64_t TicksToNsAt(uint64_t ticks, double ns_per_tick) {
  return static_cast<uint64_t>(
      static_cast<int64_t>(static_cast<double>(static_cast<int64_t>(ticks)) * ns_per_tick));
}

}  // namespace mrcache

#endif  // MRCACHE_CORE_TICK_CLOCK_H_
