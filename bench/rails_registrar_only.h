// rails_registrar_only.h: what one registration costs the rails' registrars
// themselves, without a cache, on the rails workload's buffers: the part of
// mrbench --rails's time ratio that belongs to the registrar (the kernel, for
// the registrars that pin) rather than to mrcache.
//
// Each buffer is mapped and filled as the workload does (same sizes, same
// order), then registered whole on one rail (`first`: its pages were never
// pinned), on each other rail (`added`: its pages are pinned on the first
// rail), deregistered everywhere, and registered once more on the first
// rail (`again`: its pages were pinned and unpinned just before, so the
// kernel's page metadata is as warm as for `added`, but nothing pins them),
// then unmapped and that registration deregistered (`unmapped`: the order a
// cache sees, whose monitor reports the munmap and deregisters at its next
// call; the last unpin frees the pages, which munmap could not).
// `one rail` is what lazy registration pays per buffer (first + its
// deregistration), `every rail` what eager registration pays (first, the
// added rails and every rail's deregistration): their ratio is the best
// mrcache's rails time ratio can be for these buffers on this registrar when
// deregistration does not free the pages; the `_unmapped` pair charges the
// last deregistration as after a munmap instead, as the cache's calls do.
#ifndef BENCH_RAILS_REGISTRAR_ONLY_H_
#define BENCH_RAILS_REGISTRAR_ONLY_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "mrcache/config.h"

namespace mrbench {

// Seconds spent in the registrars' calls, summed over every buffer.
struct RegistrarOnlyTimes {
  double first_s = 0;           // registrations of never-pinned pages, one per buffer
  double added_s = 0;           // registrations on rails 1..n-1 of pages pinned on rail 0
  double again_s = 0;           // a registration of pages unpinned just before, one per buffer
  double last_dereg_s = 0;      // deregistrations that unpin the pages' last pin
  double other_dereg_s = 0;     // deregistrations while another rail still pins the pages
  double unmapped_dereg_s = 0;  // deregistrations of an unmapped buffer's last pin
  size_t buffers = 0;
  // What lazy registration pays (first + last deregistration) and what
  // eager pays (every rail registered and deregistered), summed over buffers.
  double one_rail_s() const { return first_s + last_dereg_s; }
  double every_rail_s() const { return first_s + added_s + last_dereg_s + other_dereg_s; }
  // The same with the last deregistration after the munmap.
  double one_rail_unmapped_s() const { return first_s + unmapped_dereg_s; }
  double every_rail_unmapped_s() const {
    return first_s + added_s + unmapped_dereg_s + other_dereg_s;
  }
};

// Maps, fills, registers and deregisters each buffer of `sizes` (bytes) on
// `rails` fresh registrars of base.registrar's kind (2..64 rails; EINVAL
// otherwise), as described above.
absl::StatusOr<RegistrarOnlyTimes> TimeRegistrarOnly(const mrcache::Config& base, int rails,
                                                     const std::vector<size_t>& sizes);

}  // namespace mrbench

#endif  // BENCH_RAILS_REGISTRAR_ONLY_H_
