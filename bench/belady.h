// belady.h: the offline optimum (Belady's MIN) for a registration cache
// without merging.
//
// Model: on a miss, a region is registered for exactly the page-aligned
// range the transfer asks for, with that transfer's access; a transfer hits
// when a cached region with the same access contains its range. At most
// `max_regions` regions stay cached (0 = unlimited); a released range drops
// every cached region overlapping it (the same invalidation the real caches
// get). Belady's rule decides what stays: a region's next use is the next
// transfer it contains, or never if a release drops it first; on a miss the
// new region is kept only if it is needed sooner than some cached region,
// and then the cached region needed furthest in the future is evicted.
//
// When every transfer of a buffer asks for the same range (pingpong, zipf),
// this is exactly MIN, the optimum: no cache without merging can hit more
// often. Where transfers nest inside one another (churn's partial transfers,
// ring, kv), the rule is the natural generalisation of MIN, not a proven
// bound.
//
// A private access (remote_keys=private: a request with a remote right in a
// recording made under that rule, private_remote_keys.h) is registered for
// itself and never kept: it always counts as a registration, never hits, and
// is no region's next use.
//
// A byte capacity (`max_bytes`, e.g. a pinned-memory budget) bounds the
// pinned bytes including the region being registered, as it does for a real
// cache: before a miss registers, the cached regions needed furthest in the
// future are dropped until it fits (a region larger than the capacity is
// registered for its transfer and never kept). With regions of different
// sizes this is Belady's rule applied to bytes, a strong heuristic rather
// than the optimum (that problem is NP-hard).
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
  uintptr_t start = 0, end = 0;       // kAccess: the aligned region; kRelease: the released bytes
  int access = 0;                     // kAccess only
  bool private_registration = false;  // kAccess only: registered for itself, never cached
};

struct OptimalResult {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  uint64_t registrations = 0;      // misses
  uint64_t registered_bytes = 0;   // sum of missed region sizes
  uint64_t peak_pinned_bytes = 0;  // largest sum of cached region sizes (including the one in use)
};

// max_regions, max_bytes: 0 = unlimited.
OptimalResult OptimalHits(const std::vector<CacheEvent>& events, size_t max_regions,
                          size_t max_bytes = 0);

// The events a trace produces when its buffers come from malloc, as the
// replayer allocates them (addresses are replayed with malloc/free here).
// A recorded trace: each reg is an access at its recorded address, each
// release a release; deregs are not events. Under a recording's
// remote_keys=private, accesses with a remote right are private.
std::vector<CacheEvent> TraceEvents(const Trace& trace);

}  // namespace mrbench

#endif  // BENCH_BELADY_H_
