// ucs_api.h: UCX 1.13's registration cache (libucs) loaded at run time, hooks off.
//
// Loading libucs runs its constructors, which read the UCX_* environment and
// may later install memory hooks into the process . So
// mrbench never links libucs: the UCX peer loads it with dlopen, in its own
// process, after setting UCX_MEM_MMAP_HOOK_MODE=none, and then checks that
// UCM really reads the hook mode as none. Invalidations reach ucs_rcache the
// public way UCM documents for callers with their own hooks (Open MPI does
// this): UCM_EVENT_VM_UNMAPPED is declared external with
// ucm_set_external_event, and the caller reports each release with
// ucm_vm_munmap, which runs the rcache's unmap handler.
#ifndef BENCH_UCS_API_H_
#define BENCH_UCS_API_H_

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "absl/status/statusor.h"

namespace mrbench {

// The libucs/libucm entry points the peer uses (their documented signatures).
struct UcsApi {
  decltype(&::ucs_rcache_create) rcache_create;
  decltype(&::ucs_rcache_destroy) rcache_destroy;
  decltype(&::ucs_rcache_get) rcache_get;
  decltype(&::ucs_rcache_region_put) rcache_region_put;
  decltype(&::ucm_set_external_event) set_external_event;
  decltype(&::ucm_vm_munmap) vm_munmap;
  const ucm_global_config_t* ucm_opts;
};

// Sets UCX_MEM_MMAP_HOOK_MODE=none unless libucs is already loaded, loads
// libucs.so.0, resolves the entry points and declares VM_UNMAPPED external.
// FAILED_PRECONDITION if the hook mode is not none afterwards (libucs was
// loaded earlier with hooks on); NOT_FOUND if libucs cannot be loaded.
// Idempotent: later calls return the same table.
absl::StatusOr<const UcsApi*> LoadUcsWithoutHooks();

}  // namespace mrbench

#endif  // BENCH_UCS_API_H_
