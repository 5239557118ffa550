// voided_regions.h: which cached regions a release of memory voids.
//
// Regions start and end on multiples of the cache's alignment (or of the
// page size, when registering fell back to exact pages), so rounding the
// released range to the finer of the two finds every region that overlaps
// it. Of those, a region is voided if the range overlaps its used bytes
// (Region::used_start) or spans a whole page of it: a mapping changes a
// whole page at a time.
//
// Reads the index the cache gives it, under the cache's lock; changes
// nothing but the voided regions' next_dead links.
#ifndef MRCACHE_CORE_VOIDED_REGIONS_H_
#define MRCACHE_CORE_VOIDED_REGIONS_H_

#include <cstddef>
#include <cstdint>

#include "mrcache/core/interval_tree.h"
#include "mrcache/core/region.h"

namespace mrcache {

// The regions of `index` a release of [start, end) voids, linked through
// next_dead (nullptr if none), for a cache of alignment `align` and pages
// of `page` bytes.
Region* RegionsVoidedBy(const IntervalTree<Region*>& index, uintptr_t start, uintptr_t end,
                        size_t align, size_t page);

}  // namespace mrcache

#endif  // MRCACHE_CORE_VOIDED_REGIONS_H_
