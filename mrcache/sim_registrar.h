// sim_registrar.h: a deterministic registration cost model.
//
// Register spins for base_ns + page_ns * pages (4 KiB pages) and returns
// synthetic keys; Deregister costs base_ns / 2. With sim_mlock it pins with
// mlock/munlock (overlapping mlocks are reference-counted per page). It keeps
// a copy of nothing: DeviceWrite writes through the CPU mapping (so it cannot
// detect staleness) unless mlock is on. ODP (access has IBV_ACCESS_ON_DEMAND)
// pins nothing and charges odp_page_ns per page at first DeviceWrite/Prefetch.
// Unmapped memory is EFAULT (checked with mincore-free probing via
// process_vm_readv or msync).
#ifndef MRCACHE_SIM_REGISTRAR_H_
#define MRCACHE_SIM_REGISTRAR_H_

#include <memory>

#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

std::unique_ptr<Registrar> MakeSimRegistrar(const Config& config);

}  // namespace mrcache

#endif  // MRCACHE_SIM_REGISTRAR_H_
