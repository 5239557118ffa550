#include "mrcache/core/residency.h"

#include <sys/mman.h>

namespace mrcache {
namespace {

constexpr size_t kChunkPages = 1024;

bool Mapped(uintptr_t start, size_t pages, size_t page, unsigned char* vec) {
  return mincore(reinterpret_cast<void*>(start), pages * page, vec) == 0;
}

// Residency of the `pages` pages at `start` into vec; returns how many of them
// (from the low end if !downward, else from the high end) are mapped and
// resident before the first one that is not.
size_t ResidentRun(uintptr_t start, size_t pages, size_t page, bool downward, unsigned char* vec) {
  if (!Mapped(start, pages, page, vec)) {
    // An unmapped page inside: find the longest mapped prefix (or suffix) by
    // binary search, then read its residency.
    size_t lo = 0, hi = pages;  // lo pages known mapped, hi known not
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      uintptr_t s = downward ? start + (pages - mid) * page : start;
      if (Mapped(s, mid, page, vec)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    if (lo == 0) return 0;
    start = downward ? start + (pages - lo) * page : start;
    pages = lo;
    if (!Mapped(start, pages, page, vec)) return 0;  // changed meanwhile
  }
  size_t run = 0;
  for (size_t i = 0; i < pages; ++i) {
    size_t idx = downward ? pages - 1 - i : i;
    if ((vec[idx] & 1) == 0) break;
    ++run;
  }
  return run;
}

}  // namespace

uintptr_t ResidentEnd(uintptr_t from, uintptr_t limit, size_t page) {
  unsigned char vec[kChunkPages];
  uintptr_t p = from;
  while (p < limit) {
    size_t pages = (limit - p) / page;
    if (pages > kChunkPages) pages = kChunkPages;
    size_t run = ResidentRun(p, pages, page, /*downward=*/false, vec);
    p += run * page;
    if (run < pages) break;
  }
  return p;
}

uintptr_t ResidentStart(uintptr_t from, uintptr_t limit, size_t page) {
  unsigned char vec[kChunkPages];
  uintptr_t p = from;
  while (p > limit) {
    size_t pages = (p - limit) / page;
    if (pages > kChunkPages) pages = kChunkPages;
    size_t run = ResidentRun(p - pages * page, pages, page, /*downward=*/true, vec);
    p -= run * page;
    if (run < pages) break;
  }
  return p;
}

}  // namespace mrcache
