// voided_regions.cc: the regions a release voids (voided_regions.h).
#include "mrcache/core/voided_regions.h"

#include "mrcache/core/range.h"

namespace mrcache {

Region* RegionsVoidedBy(const IntervalTree<Region*>& index, uintptr_t start, uintptr_t end,
                        size_t align, size_t page) {
  const size_t fine = align < page ? align : page;
  uintptr_t s = AlignDown(start, fine);
  uintptr_t e = AlignUp(end, fine);
  if (e == 0) e = UINTPTR_MAX;
  uintptr_t whole_start = AlignUp(start, page);
  if (whole_start == 0) whole_start = UINTPTR_MAX;  // no whole page above start
  const uintptr_t whole_end = end == UINTPTR_MAX ? UINTPTR_MAX : AlignDown(end, page);
  struct Collect {
    Region* list;
    uintptr_t start, end, whole_start, whole_end;
  } c{nullptr, start, end, whole_start, whole_end};
  index.ForEachOverlap(s, e, [&c](uintptr_t rs, uintptr_t re, Region* r) {
    bool touches_used = r->used_start < c.end && c.start < r->used_end;
    bool spans_a_page = c.whole_start < c.whole_end && rs < c.whole_end && c.whole_start < re;
    if (!touches_used && !spans_a_page) return;
    r->next_dead = c.list;
    c.list = r;
  });
  return c.list;
}

}  // namespace mrcache
