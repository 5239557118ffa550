// rails_get.cc: the public Cache's get on rails (mrcache/cache.h), beside
// Cache::Acquire (cache_impl.cc), which calls it for a rails cache: every
// binary that links the core's get links this one.
//
// A miss registers the rails the get asked for (RailsRegistrar::AskScope
// around the core's get); a hit whose region lacks an asked rail registers
// that rail outside any lock while the caller's reference keeps the region
// registered (RailsRegistrar::Complete). config.max_bytes counts a region
// once per rail it is on: a get that leaves more registered evicts unused
// regions.
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "mrcache/cache.h"
#include "mrcache/core/cache_impl.h"
#include "mrcache/core/region.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/pin_budget.h"
#include "mrcache/registrars/rails_registrar.h"

namespace mrcache {

absl::StatusOr<Region*> Cache::AcquireRails(void* addr, size_t length, int access, uint64_t rails) {
  const uint64_t all = rails_ != nullptr ? rails_->all_rails() : 1;
  if (rails == 0 || (rails & ~all) != 0) {
    return ErrnoStatus(EINVAL, absl::StrCat("rails mask 0x", absl::Hex(rails),
                                            " is 0 or names a rail at or above the cache's ",
                                            rails_ != nullptr ? rails_->rail_count() : 1));
  }
  if (rails_ == nullptr) return impl_->Acquire(addr, length, access);
  absl::StatusOr<Region*> region;
  {
    RailsRegistrar::AskScope ask(rails);  // for the registration of a miss
    region = impl_->Acquire(addr, length, access);
  }
  if (!region.ok()) return region;
  const uint64_t missing = rails & ~RailsRegistrar::Present((*region)->reg);
  if (__builtin_expect(missing != 0, 0)) {
    absl::Status done = CompleteRails(*region, missing);
    if (!done.ok()) {
      (void)Put(*region);
      return done;
    }
  }
  if (rails_max_bytes_ != 0 && rails_->registered_bytes() > rails_max_bytes_) {
    KeepRailsWithinMaxBytes();
  }
  return region;
}

void Cache::KeepRailsWithinMaxBytes() {
  // The core counts a region's bytes once against max_bytes; the rails
  // beyond its first come on top. ReclaimUnused counts what it evicts once
  // per region too, so asking it for the excess evicts enough, if enough is
  // unused.
  const uint64_t registered = rails_->registered_bytes();
  if (registered > rails_max_bytes_) impl_->ReclaimUnused(registered - rails_max_bytes_);
}

absl::Status Cache::CompleteRails(Region* region, uint64_t missing) {
  // Each added rail pins the region's bytes once more: make room under the
  // process's budget first, as a miss would (unused regions of this cache).
  const size_t adding = static_cast<size_t>(__builtin_popcountll(missing)) * region->length();
  PinBudget& budget = PinBudget::Process();
  const size_t limit = rails_->pins_memory() ? budget.budget() : 0;
  if (limit != 0 && budget.pinned() + adding > limit) {
    impl_->ReclaimUnused(budget.pinned() + adding - limit);
  }
  absl::Status done = rails_->Complete(region->reg, missing);
  const int err = StatusToErrno(done);
  if (err == ENOMEM || err == EAGAIN) {
    // The device or RLIMIT_MEMLOCK refused: give back unused regions, once.
    impl_->ReclaimUnused(adding);
    done = rails_->Complete(region->reg, missing);
  }
  return done;
}

}  // namespace mrcache
