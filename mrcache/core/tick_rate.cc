#include "mrcache/core/tick_rate.h"

namespace mrcache {
namespace {

// The clock's value and the counter at the middle of the reads around it.
struct Reading {
  uint64_t ticks = 0;
  uint64_t ns = 0;
};

Reading Narrowest(uint64_t (*ticks)(), uint64_t (*ns)(), int readings) {
  Reading best;
  uint64_t best_width = ~uint64_t{0};
  for (int i = 0; i < readings; ++i) {
    const uint64_t before = ticks();
    const uint64_t now = ns();
    const uint64_t after = ticks();
    if (after < before) continue;  // a counter read behind: no sandwich
    if (after - before < best_width) {
      best_width = after - before;
      best.ticks = before + best_width / 2;
      best.ns = now;
    }
  }
  return best;
}

}  // namespace

double MeasureNsPerTick(uint64_t (*ticks)(), uint64_t (*ns)(), uint64_t span_ns, int readings) {
  if (readings < 1) readings = 1;
  const Reading start = Narrowest(ticks, ns, readings);
  while (ns() - start.ns < span_ns) {
  }
  const Reading end = Narrowest(ticks, ns, readings);
  if (end.ticks <= start.ticks || end.ns <= start.ns) return 0;
  return static_cast<double>(end.ns - start.ns) / static_cast<double>(end.ticks - start.ticks);
}

}  // namespace mrcache
