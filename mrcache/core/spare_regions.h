// spare_regions.h: Regions whose quarantine ended (deregistration.h), kept
// for the next misses to reuse instead of freeing them and allocating anew:
// up to two batches, the one being taken and a whole one behind it (each
// linked through next_dead). A kept Region holds its old state until Reuse.
//
// Under AddressSanitizer nothing is kept: every Region whose quarantine
// ended is freed, so that a use after free stays visible.
//
// Not thread-safe: the cache guards it with its lock (a miss takes a spare
// under the lock it holds anyway, and makes it new after releasing it).
#ifndef MRCACHE_CORE_SPARE_REGIONS_H_
#define MRCACHE_CORE_SPARE_REGIONS_H_

#include <new>

#include "mrcache/core/region.h"

#if defined(__SANITIZE_ADDRESS__)
#define MRCACHE_FREE_EVERY_REGION 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MRCACHE_FREE_EVERY_REGION 1
#endif
#endif

namespace mrcache {

class SpareRegions {
 public:
  // Keeps `batch` if fewer than two batches are kept; returns the Regions
  // not kept (all of them under AddressSanitizer), for the caller to free.
  Region* Keep(Region* batch) {
#ifndef MRCACHE_FREE_EVERY_REGION
    if (taking_ == nullptr) {
      taking_ = batch;  // the next misses' Regions
      return nullptr;
    }
    if (behind_ == nullptr) {
      behind_ = batch;  // theirs after those
      return nullptr;
    }
#endif
    return batch;
  }
  // A kept Region, or nullptr if there is none.
  Region* Take() {
    if (taking_ == nullptr) {
      taking_ = behind_;
      behind_ = nullptr;
    }
    Region* r = taking_;
    if (r != nullptr) taking_ = r->next_dead;
    return r;
  }
  // Without the cache's lock: `spare` (from Take) as a new Region, or a newly
  // allocated one if spare is null.
  static Region* Reuse(Region* spare) {
    if (spare == nullptr) return new Region;  // with its index node
    spare->~Region();
    return new (spare) Region;
  }
  // Every kept Region, taken out (linked through next_dead).
  Region* TakeAll() {
    Region* all = taking_ != nullptr ? taking_ : behind_;
    if (taking_ != nullptr) {
      Region* tail = taking_;
      while (tail->next_dead != nullptr) tail = tail->next_dead;
      tail->next_dead = behind_;
    }
    taking_ = behind_ = nullptr;
    return all;
  }

 private:
  Region* taking_ = nullptr;
  Region* behind_ = nullptr;
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_SPARE_REGIONS_H_
