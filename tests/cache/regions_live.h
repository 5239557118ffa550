// regions_live.h: a window of misses in which a cache's regions live, for
// tests of merge unions that join other requests' bytes. Under a pin budget
// the cache plans such a union only after a window of misses in which fewer
// than one region per AddressChurn::kMissesPerDeath misses died by
// invalidation (mrcache/core/address_churn.h).
#ifndef MRCACHE_TESTS_CACHE_REGIONS_LIVE_H_
#define MRCACHE_TESTS_CACHE_REGIONS_LIVE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>

#include "mrcache/cache.h"
#include "mrcache/core/address_churn.h"

namespace mrcache {
namespace testing {

// AddressChurn::kWindowMisses gets and puts of one page each, on pages of
// their own (an unmapped page between neighbours: nothing merges or
// bridges), the first `deaths` of them invalidated after their put; then the
// cache is flushed and the pages unmapped, so the registrar holds what it
// held before. False if the window could not be run (no memory for its
// pages, a failed get, put, invalidation or flush).
inline bool LiveAWindow(Cache& cache, size_t deaths = 0) {
  constexpr size_t kMisses = AddressChurn::kWindowMisses;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = 2 * kMisses * page;
  char* pages = static_cast<char*>(
      mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (pages == MAP_FAILED) return false;
  bool ran = true;
  for (size_t i = 0; i < kMisses && ran; ++i) {
    char* at = pages + 2 * i * page;
    munmap(at + page, page);  // apart from the next one
    at[0] = 1;
    auto r = cache.Acquire(at, page, kAccessLocalWrite);
    ran = r.ok() && cache.Put(*r).ok() && (i >= deaths || cache.Invalidate(at, page).ok());
  }
  ran = cache.Flush().ok() && ran;
  munmap(pages, span);
  return ran;
}

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_REGIONS_LIVE_H_
