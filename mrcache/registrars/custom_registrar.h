// custom_registrar.h: a Registrar over the caller's C callbacks
// (mrc_registrar_ops_t), as runtimes plug in their own registration (one
// region on several NICs, ...) the way ucs_rcache's ops do.
//
// The callbacks are called without any cache lock held and may allocate. A
// callback's return value is an errno (0 = success; a negative value is taken
// as its absolute value). The registrar validates length, overflow and access
// bits before calling `reg`, so callbacks see only well-formed requests.
#ifndef MRCACHE_CUSTOM_REGISTRAR_H_
#define MRCACHE_CUSTOM_REGISTRAR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "mrcache/mrcache.h"
#include "mrcache/registrar.h"

namespace mrcache {

// A registrar calling ops' callbacks with ctx; `pins` is what its
// pins_memory() answers (the config key custom_pins: whether the callbacks'
// registrations count against RLIMIT_MEMLOCK, so that the pin budget
// applies). EINVAL if ops or one of its callbacks is null.
absl::StatusOr<std::unique_ptr<Registrar>> MakeCustomRegistrar(const mrc_registrar_ops_t* ops,
                                                               void* ctx, bool pins = true);

// One registrar per rail 0..nrails-1, each calling ops' callbacks with its
// rail and ctx (for RailsRegistrar); `pins` as above. EINVAL if ops or one
// of its callbacks is null, or nrails is outside 1..64.
absl::StatusOr<std::vector<std::unique_ptr<Registrar>>> MakeCustomRailRegistrars(
    const mrc_rail_registrar_ops_t* ops, void* ctx, int nrails, bool pins = true);

}  // namespace mrcache

#endif  // MRCACHE_CUSTOM_REGISTRAR_H_
