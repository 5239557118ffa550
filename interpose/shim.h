// shim.h: what each interposed libibverbs call does (preload.cc forwards the
// exported symbols here).
//
// Registration (ibv_reg_mr, ibv_reg_mr_iova, ibv_reg_mr_iova2):
//  - Requests that must bypass the cache (MW_BIND,
//    ZERO_BASED, iova != addr, a null address such as the implicit ODP MR),
//    a null PD, and every request while caching is disabled go to the same
//    real entry point the application called: the application gets the real
//    MR, exactly as without the shim.
//  - Everything else is one lookup in the PD's cache; the application gets an
//    alias (alias_registry.h). If the cache fails, the request is registered
//    directly instead, so the outcome -- including NULL + errno -- is the real
//    library's; except when the device itself refused the request's own pages
//    (EFAULT: memory it cannot pin, EACCES: rights the memory does not allow,
//    DeviceRefusedPages): the device would refuse them again, so the request
//    fails with that errno and is not tried a second time.
//  - Requests with a remote right, under remote_keys=private (the shim's
//    default, shim_defaults.h), get a registration of exactly their bytes
//    that the alias's ibv_dereg_mr deregisters: the rkey dies with it, as
//    without the shim. Under remote_keys=shared they are cached, and the rkey
//    reaches the union of the pages registered with the same remote rights
//    until the cache deregisters that region.
//  - Only PDs the application got from ibv_alloc_pd (through the shim) and
//    still holds are cached; any other PD pointer -- deallocated, of a closed
//    device, foreign, a parent domain -- is never read by the shim and goes to
//    the real entry point, which answers for it.
// ibv_alloc_pd: the real function; a PD it returns is adopted (pd_caches.h).
// ibv_dereg_mr: an alias is a put (or the dedicated MR's deregistration);
//   anything else passes through.
// ibv_rereg_mr on a cached alias: the same input checks as libibverbs
//   (IBV_REREG_MR_ERR_INPUT + EINVAL), then the new translation/PD/access is
//   registered directly and, only if that succeeded, the cached reference is
//   put and the alias becomes dedicated -- the application's pointer stays
//   valid, and on failure the old registration is untouched (the man page's
//   ERR_INPUT contract). Keys may change, as the man page allows.
// ibv_dealloc_pd: EBUSY while aliases of the PD are held; otherwise the PD's
//   cache is destroyed (its unused regions deregistered) and the real
//   function decides; if it deallocates, the PD is forgotten.
// ibv_close_device: the caches of the context's PDs are destroyed first;
//   aliases still held become orphans (dereg -> EINVAL, like the real
//   library's registry after close).
//
// MRCACHE_RECORD=PATH: every request a PD cache serves, its deregistration,
// and every release the monitors report are written to PATH (recorder.h);
// nothing is recorded while caching is disabled.
//
// fork() without exec, with other threads inside the shim: pthread_atfork
// handlers (installed when the shim is created, after the library's own,
// so they run first before the fork and last after it) take the alias
// registry's mutex, then the PD cache map's, and release them in reverse in
// the parent and in the child; the library's handlers then take the
// monitors' and caches' locks (mrcache/monitors/fork_guard.h), so no child
// inherits a lock another thread held. A child never uses its parent's registrations,
// as the library's caches enforce (they answer ECHILD there): its
// ibv_reg_mr on a PD inherited from the parent gets a registration of its
// own (the cache fails, the request is registered directly); ibv_dereg_mr
// of an alias inherited from the parent fails with ECHILD and deregisters
// nothing; a device opened and a PD allocated in the child get a new cache.
// (tests/interpose/fork_test.cc)
//
// Caching is disabled (everything passes through, with one warning on
// stderr) when the MRCACHE_* configuration is invalid, or when no memory
// monitor can be installed although the configuration relies on one
// (monitor != none and odp = off): a blind cache could return stale
// registrations after free/munmap, and the shim must never do that.
#ifndef INTERPOSE_SHIM_H_
#define INTERPOSE_SHIM_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "interpose/alias_registry.h"
#include "interpose/pd_caches.h"
#include "interpose/recorder.h"
#include "interpose/shim_defaults.h"
#include "interpose/stats_report.h"
#include "mrcache/config.h"
#include "mrcache/monitors/monitor.h"

namespace mrcache_preload {

enum class RegEntry { kRegMr, kRegMrIova, kRegMrIova2 };

class Shim {
 public:
  // The process's shim, created on first use (reads MRCACHE_*).
  static Shim& Get();
  // nullptr until Get() was first called.
  static Shim* IfCreated();

  ibv_mr* Register(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                   unsigned access);
  ibv_mr* RegisterDmabuf(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                         int access);
  int Deregister(ibv_mr* mr);
  int Reregister(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access);
  ibv_pd* AllocPd(ibv_context* context);
  int DeallocPd(ibv_pd* pd);
  int CloseDevice(ibv_context* context);

  Report MakeReport() const;
  size_t live_aliases() const { return aliases_.size(); }

  // The fork() protocol (above): takes the shim's locks in their order /
  // releases them (in the parent, and in the child where no other thread exists).
  void LockForFork();
  void UnlockAfterFork();

 private:
  Shim();
  ibv_mr* Direct(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                 unsigned access);
  // Direct, counting a failure (CountDirectFailure).
  ibv_mr* CountedDirect(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                        unsigned access);
  // Returns `mr`; a null one (a registration the device refused) counts
  // once in failed_ and direct_failures_.
  ibv_mr* CountDirectFailure(ibv_mr* mr);
  int ReregisterCached(Alias* alias, int flags, ibv_pd* pd, void* addr, size_t length, int access);
  // Registers and deregisters exactly the request once, outside the cache,
  // and records the time as a sample of what the cache saves
  // (registrar_costs.h). A failure just means no sample; errno is kept.
  void SampleRegistrationCost(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                              unsigned access);

  std::string disabled_;                            // non-empty: pass everything through
  std::string remote_keys_;                         // "shared" | "private" ("" while disabled)
  bool sample_costs_ = false;                       // a report is requested: price what is saved
  std::unique_ptr<mrcache::MonitorLease> monitor_;  // keeps the monitor installed all run
  std::unique_ptr<PdCaches> caches_;                // null while disabled
  std::unique_ptr<Recorder> recorder_;              // MRCACHE_RECORD (null: not recording)
  AliasRegistry aliases_;

  std::atomic<uint64_t> calls_{0}, lookups_{0}, bypassed_{0}, fallbacks_{0}, alias_deregs_{0},
      passthrough_deregs_{0}, rereg_conversions_{0}, busy_deallocs_{0}, failed_{0},
      direct_failures_{0};
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_SHIM_H_
