// sim_registrar.h: a deterministic registration cost model.
//
// Register spins for sim_base_ns + sim_page_ns * pages (4 KiB pages, counting
// every page the range touches) and returns synthetic keys; Deregister spins
// for sim_base_ns / 2. The defaults in config.h follow the io_uring curve of
// the figures in tests/registrars/sim_registrar_test.cc. With both costs 0 a registration costs a
// mincore call and a hash-map insert, so the cache's own overhead can be measured.
//
// Invariants:
//  - Same argument checks as every registrar (registration_checks.h); memory
//    that is not (entirely) mapped is EFAULT. PROT_NONE memory counts as
//    mapped (mincore cannot tell).
//  - handle is unique per registration and never 0; lkey = rkey = the low 32
//    bits of the handle, never 0 (keys repeat only after 2^32 registrations).
//  - Every live registration is tracked: Deregister/DeviceWrite/Prefetch of
//    one this registrar did not return (or already deregistered) is EINVAL.
//  - sim_mlock: non-ODP registrations are mlock()ed; overlapping registrations
//    share pages, so pins are counted per page and a page is munlock()ed only
//    when the last registration covering it goes. mlock failing for
//    RLIMIT_MEMLOCK is ENOMEM naming the limit.
//  - ODP (access has IBV_ACCESS_ON_DEMAND): pins nothing and does not check
//    the mapping at Register (like a real ODP MR); costs sim_base_ns, then
//    sim_odp_page_ns per page the first time a DeviceWrite or Prefetch touches
//    it. Implicit ODP is addr == nullptr, length == SIZE_MAX.
//  - DeviceWrite copies through the CPU mapping (memcpy), so unlike uring it
//    cannot reproduce stale registrations; unmapped target memory is EFAULT.
//  - The simulated cost is spent outside any lock, and accumulated exactly in
//    SimRegistrarStats::simulated_ns (tests use it, not wall time).
#ifndef MRCACHE_SIM_REGISTRAR_H_
#define MRCACHE_SIM_REGISTRAR_H_

#include <cstdint>
#include <memory>

#include "absl/types/optional.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

std::unique_ptr<Registrar> MakeSimRegistrar(const Config& config);

// Counters of a sim registrar.
struct SimRegistrarStats {
  uint64_t registrations = 0;      // successful Register calls
  uint64_t deregistrations = 0;    // successful Deregister calls
  uint64_t live = 0;               // registrations - deregistrations
  uint64_t simulated_ns = 0;       // modelled cost of every call so far
  uint64_t odp_faulted_pages = 0;  // ODP pages charged at first touch
  uint64_t mlocked_pages = 0;      // pages currently mlock()ed (sim_mlock)
};
// nullopt if `registrar` is not a sim registrar.
absl::optional<SimRegistrarStats> GetSimRegistrarStats(const Registrar& registrar);

}  // namespace mrcache

#endif  // MRCACHE_SIM_REGISTRAR_H_
