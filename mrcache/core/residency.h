// residency.h: how far resident memory extends from a point.
//
// The cache widens a miss across the gaps between nearby regions ("bridging")
// only over memory that is already resident: registering pins what it covers,
// and pinning a page that was never touched would allocate it; an unmapped
// page would make the registration fail (EFAULT).
//
// Invariants: a few mincore(2) calls per 4 MiB scanned (one per chunk, plus a
// binary search for the edge of a mapping), no allocation, no lock, no
// memory-event side effects (mincore neither maps nor unmaps), so it may run
// under the cache lock. The answer can be out of date as soon as it returns:
// it only steers a heuristic; registration itself decides what is valid.
#ifndef MRCACHE_RESIDENCY_H_
#define MRCACHE_RESIDENCY_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {

// The largest e' with from <= e' <= limit such that every page of
// [from, e') is mapped and resident. `from` and `limit` are multiples of `page`.
uintptr_t ResidentEnd(uintptr_t from, uintptr_t limit, size_t page);

// The smallest s' with limit <= s' <= from such that every page of
// [s', from) is mapped and resident. Multiples of `page`.
uintptr_t ResidentStart(uintptr_t from, uintptr_t limit, size_t page);

}  // namespace mrcache

#endif  // MRCACHE_RESIDENCY_H_
