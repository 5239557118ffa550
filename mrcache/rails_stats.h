// rails_stats.h: a rails cache's figures as mrc_stats reports them.
//
// The core counts a region once, however many rails it is registered on;
// each rail's registration pins memory and costs registrar time of its own.
// So for a rails cache, registrations, deregistrations, registrar time and
// pinned bytes (and their peak) are the sums over its rails (RailsRegistrar's
// counters), and everything else (regions, hits, misses, ...) is the core's.
// Cache::stats and the live statistics page both report these, so that
// mrc_stats, mrcache-info and MRCACHE_STATS agree.
#ifndef MRCACHE_RAILS_STATS_H_
#define MRCACHE_RAILS_STATS_H_

#include "mrcache/cache.h"
#include "mrcache/registrars/rails_registrar.h"

namespace mrcache {

// `core` (the cache's own stats) with the per-registration figures replaced
// by the sums over `rails`.
inline CacheStats CountedOnEachRail(CacheStats core, const RailsRegistrar& rails) {
  core.registrations = core.deregistrations = core.registrar_ns = 0;
  for (int rail = 0; rail < rails.rail_count(); ++rail) {
    const RailStats r = rails.stats(rail);
    core.registrations += r.registrations;
    core.deregistrations += r.deregistrations;
    core.registrar_ns += r.registrar_ns;
  }
  core.pinned_bytes = rails.registered_bytes();
  core.peak_pinned_bytes = rails.peak_registered_bytes();
  return core;
}

}  // namespace mrcache

#endif  // MRCACHE_RAILS_STATS_H_
