// tick_rate.h: the rate of a cheap counter (the x86 time-stamp counter)
// against a clock (steady_clock's nanoseconds), measured once.
//
// The measurement spans at least `span_ns` of the clock. Each of its two ends
// is the narrowest of `readings` counter-clock-counter sandwiches, the counter
// taken at the middle of the narrowest: a thread preempted between two reads
// of one sandwich (a time slice is many times a measurement of half a
// millisecond) widens that sandwich and is not used, instead of skewing the
// rate for as long as it is kept.
#ifndef MRCACHE_CORE_TICK_RATE_H_
#define MRCACHE_CORE_TICK_RATE_H_

#include <cstdint>

namespace mrcache {

// Nanoseconds per counter tick, measured by reading `ticks` and `ns` (each
// a function returning the current value) as above. 0 if the counter did not
// advance over the measurement (then it is no clock to use). `readings` of
// less than 1 is taken as 1.
double MeasureNsPerTick(uint64_t (*ticks)(), uint64_t (*ns)(), uint64_t span_ns, int readings);

}  // namespace mrcache

#endif  // MRCACHE_CORE_TICK_RATE_H_
