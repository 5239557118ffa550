// registrar.h: the only code that talks to a NIC or to the kernel's pinning.
//
// A Registrar registers a byte range for device access and deregisters it
// later. The cache calls it WITHOUT holding any cache lock: a Registrar may
// allocate, free, mmap, madvise or munmap (rdma-core does all of these inside
// ibv_reg_mr), and so may fire memory events that re-enter the cache's
// invalidation handler.
//
// Implementations (one file each): uring_registrar (io_uring fixed buffers,
// real kernel pinning), sim_registrar (deterministic cost model), verbs_registrar
// (rdma-core on a caller's ibv_pd), custom_registrar (C callbacks,
// mrc_registrar_ops_t and mrc_rail_registrar_ops_t), and rails_registrar (one
// registrar per PD, each region registered lazily per rail).
//
// Contract, for every implementation:
//  - Register(addr, len, access): addr and len are what the cache asks for
//    (already aligned by the cache). len == 0 or addr+len overflowing -> EINVAL;
//    unknown access bits or REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE ->
//    EINVAL; memory that is not mapped -> EFAULT; out of resources -> ENOMEM or
//    EAGAIN (the cache then evicts unused regions and retries once); len above
//    max_region_bytes() -> EINVAL, with a message naming that limit.
//  - pins_memory() says whether registrations count against RLIMIT_MEMLOCK.
//  - Every successful Register is matched by exactly one Deregister of the same
//    Registration; Deregister never fails for a Registration it returned
//    (a failure is reported, the resources are considered released).
//  - Errors are absl::Status made with ErrnoStatus() so the errno survives.
//  - Thread-safe: several threads may register and deregister at once.
#ifndef MRCACHE_REGISTRAR_H_
#define MRCACHE_REGISTRAR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct ibv_mr;
struct ibv_pd;

namespace mrcache {

// IBV_ACCESS_* bits that mrcache understands (values equal libibverbs').
enum AccessBits : int {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 1 << 1,
  kAccessRemoteRead = 1 << 2,
  kAccessRemoteAtomic = 1 << 3,
  kAccessMwBind = 1 << 4,
  kAccessZeroBased = 1 << 5,
  kAccessOnDemand = 1 << 6,
  kAccessHugetlb = 1 << 7,
  kAccessRelaxedOrdering = 1 << 20,
};
// Every bit ibv_reg_mr accepts.
constexpr int kAccessKnownBits = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                 kAccessRemoteAtomic | kAccessMwBind | kAccessZeroBased |
                                 kAccessOnDemand | kAccessHugetlb | kAccessRelaxedOrdering;
constexpr int kAccessRemoteBits = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

// The access rules of ibv_reg_mr(3): OK, or EINVAL with a message naming the
// offending bits.
absl::Status ValidateAccess(int access);
// The same rules as a test, for hot paths: true iff ValidateAccess is OK.
inline bool AccessValid(int access) {
  return (access & ~kAccessKnownBits) == 0 &&
         (!(access & (kAccessRemoteWrite | kAccessRemoteAtomic)) || (access & kAccessLocalWrite));
}

// What a successful registration produced.
struct Registration {
  void* addr = nullptr;  // start of the registered range
  size_t length = 0;     // its length
  int access = 0;        // the access flags it was registered with
  uint64_t handle = 0;   // registrar-specific (ibv_mr*, io_uring slot, ...)
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  // The verbs registrar's memory region (its handle is this pointer's
  // value, for mrc_region_handle and the retire callback); nullptr for every
  // other registrar. Deregister and the shim use this, never the handle.
  ibv_mr* mr = nullptr;
  // True for a registration on several PDs (registrars/rails_registrar.h):
  // handle then points at its rail set, lkey/rkey are 0, and each rail's
  // keys come from RailsRegistrar::RailRegistration. Last, so that the
  // fields before it keep their order for aggregate initialisation.
  bool rails = false;
};

// Device capabilities relevant to on-demand paging (ODP).
struct OdpCapabilities {
  bool explicit_odp = false;  // per-region IBV_ACCESS_ON_DEMAND
  bool implicit_odp = false;  // one MR for the whole address space
  bool prefetch = false;      // ibv_advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH*)
};

class Registrar {
 public:
  virtual ~Registrar() = default;

  // Short name: "uring", "sim", "verbs", "custom".
  virtual const char* name() const = 0;
  // What the registrations go to, for labelling statistics: the RDMA
  // device's name for verbs (e.g. "mlx5_0"), else name().
  virtual std::string rail() const { return name(); }

  virtual absl::StatusOr<Registration> Register(void* addr, size_t length, int access) = 0;
  virtual absl::Status Deregister(const Registration& reg) = 0;

  // Writes `length` bytes from `src` into the registered memory at
  // reg.addr + offset the way a device would: through the registration's
  // pinned pages, not through the CPU's current mapping. A stale
  // registration therefore writes into pages the application no longer sees.
  // ENOTSUP where the registrar cannot do this.
  virtual absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                                   size_t length);

  // ODP support of the underlying device (none by default).
  virtual OdpCapabilities odp_capabilities() const { return {}; }

  // True if a successful Register without IBV_ACCESS_ON_DEMAND pins pages
  // that the kernel charges against RLIMIT_MEMLOCK in a process without
  // CAP_IPC_LOCK (ibv_reg_mr: per process; io_uring buffers: per user;
  // mlock). Only then does a cache keep its pins within the process's pin
  // budget (registrars/pin_budget.h, README "Pinned-memory budget"); a
  // registrar that pins nothing gets no budget and pin_budget_bytes 0.
  // The answer never changes over the registrar's life. Default true: a
  // registrar that does not say is taken to pin (verbs, uring; sim only
  // with sim_mlock; custom as its config's custom_pins says).
  virtual bool pins_memory() const { return true; }

  // The longest range one Register accepts (the device's max_mr_size for
  // verbs, 1 GiB for an io_uring fixed buffer), 0 = no limit. The cache
  // never merges, bridges or aligns a region beyond it. The implicit ODP
  // registration (odp.h) is exempt. Never changes over the registrar's life.
  virtual size_t max_region_bytes() const { return 0; }

  // Prefetch (ODP): advise the device to fault in [addr, addr+length) of reg.
  // ENOTSUP by default.
  virtual absl::Status Prefetch(const Registration& reg, void* addr, size_t length);
};

}  // namespace mrcache

#endif  // MRCACHE_REGISTRAR_H_
