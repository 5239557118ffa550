// belady.h: the offline optimum (Belady's MIN) for a registration cache
// without merging.
//
// Model: a region is exactly the page-aligned range a transfer asks for,
// with that transfer's access; a transfer hits when a cached region has the
// identical range and access. At most `max_regions` regions stay cached
// (0 = unlimited); a released range drops every cached region overlapping
// it (the same invalidation the real caches get). On a miss, MIN keeps the
// new region only if it is needed again sooner than some cached region, and
// then evicts the cached region needed furthest in the future (regions that
// will be invalidated before their next use count as never needed again).
// For equal-sized items this is optimal, so the hit rate bounds that of
// every such cache. Caches that also hit on a containing region (a transfer
// inside a larger cached one) can beat it where transfers of one buffer use
// different ranges (ring, kv); on whole-buffer workloads (pingpong, zipf)
// the bound is exact.
#ifndef BENCH_BELADY_H_
#define BENCH_BELADY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/trace.h"

namespace mrbench {

struct CacheEvent {
  enum Kind : uint8_t { kAccess, kRelease };
  Kind kind = kAccess;
  uintptr_t start = 0, end = 0;  // kAccess: the aligned region; kRelease: the released bytes
  int access = 0;                // kAccess only
};

struct OptimalResult {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  uint64_t registrations = 0;     // misses
  uint64_t registered_bytes = 0;  // sum of missed region sizes
  uint64_t peak_pinned_bytes = 0; // largest sum of cached region sizes (including the one in use)
};

OptimalResult OptimalHits(const std::vector<CacheEvent>& events, size_t max_regions);

// The events a trace produces when its buffers come from malloc, as the
// replayer allocates them (addresses are replayed with malloc/free here).
std::vector<CacheEvent> TraceEvents(const Trace& trace);

}  // namespace mrbench

#endif  // BENCH_BELADY_H_
