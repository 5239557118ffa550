// odp.h: choosing the on-demand-paging mode a cache runs in.
//
// The configured mode (Config::odp) is a request; the device's capabilities
// (Registrar::odp_capabilities(), from ibv_query_device_ex's odp_caps) decide
// what is possible:
//  - off: regions are pinned; always possible.
//  - explicit: each region is registered with IBV_ACCESS_ON_DEMAND; needs
//    caps.explicit_odp.
//  - implicit: one MR (addr NULL, length SIZE_MAX, IBV_ACCESS_ON_DEMAND)
//    covers the address space; needs caps.implicit_odp.
//  - auto: the best the device offers: implicit, else explicit, else off.
// A mode the device lacks is an error (ENOTSUP) whose message says which
// capability is missing: the cache never silently falls back from an
// explicit request. ResolveOdpMode never returns kAuto.
#ifndef MRCACHE_ODP_H_
#define MRCACHE_ODP_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

absl::StatusOr<OdpMode> ResolveOdpMode(OdpMode requested, const OdpCapabilities& caps);

// The implicit ODP registration is Register(nullptr, kImplicitOdpLength,
// access | kAccessOnDemand): its keys cover every address of the process.
constexpr size_t kImplicitOdpLength = SIZE_MAX;

// True if `reg` is an implicit ODP registration (null address,
// kImplicitOdpLength bytes); such a registration pins nothing and has no
// range.
inline bool IsImplicitOdp(const Registration& reg) {
  return reg.addr == nullptr && reg.length == kImplicitOdpLength;
}

// Registers the implicit ODP MR through `registrar` (ENOTSUP with a message if
// its device lacks implicit ODP, EINVAL for bad access bits). The caller
// deregisters it like any other Registration.
absl::StatusOr<Registration> RegisterImplicitOdp(Registrar& registrar, int access);

}  // namespace mrcache

#endif  // MRCACHE_ODP_H_
