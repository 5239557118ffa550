// ucx_coexist_probe: UCX's registration cache (ucs_rcache, with UCM's memory
// events in UCX's default hook mode or the one UCX_MEM_MMAP_HOOK_MODE names)
// and mrcache in one process (tests/coexist/coexist_rounds.h: arguments,
// rounds, output; the other cache's name is `ucx`).
//
// UCX is loaded with dlopen so that the order is the one asked for: linking
// libucs would install its hooks before main.
#include <dlfcn.h>
#include <sys/mman.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>

#include "tests/coexist/coexist_rounds.h"

namespace {

using mrcache::testing::CoexistProbeFailed;

// ---- UCX's view ----

int g_ucx_registrations = 0;

ucs_status_t UcxMemReg(void*, ucs_rcache_t*, void*, ucs_rcache_region_t*, uint16_t) {
  ++g_ucx_registrations;
  return UCS_OK;
}
void UcxMemDereg(void*, ucs_rcache_t*, ucs_rcache_region_t*) {}
void UcxDump(void*, ucs_rcache_t*, ucs_rcache_region_t*, char* buf, size_t max) {
  if (max > 0) buf[0] = '\0';
}
const ucs_rcache_ops_t kUcxOps = {UcxMemReg, UcxMemDereg, UcxDump};

class UcxCache {
 public:
  static constexpr const char* kName = "ucx";

  // Loads libucs and creates an rcache that listens to UCM's VM_UNMAPPED.
  void Create() {
    void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (ucs == nullptr) CoexistProbeFailed(std::string("dlopen libucs.so.0: ") + dlerror());
    create_ = reinterpret_cast<decltype(create_)>(dlsym(ucs, "ucs_rcache_create"));
    get_ = reinterpret_cast<decltype(get_)>(dlsym(ucs, "ucs_rcache_get"));
    put_ = reinterpret_cast<decltype(put_)>(dlsym(ucs, "ucs_rcache_region_put"));
    destroy_ = reinterpret_cast<decltype(destroy_)>(dlsym(ucs, "ucs_rcache_destroy"));
    if (!create_ || !get_ || !put_ || !destroy_)
      CoexistProbeFailed("libucs lacks the ucs_rcache API");
    ucs_rcache_params_t params = {};
    params.region_struct_size = sizeof(ucs_rcache_region_t);
    params.alignment = 64;
    params.max_alignment = static_cast<size_t>(getpagesize());
    params.ucm_events = UCM_EVENT_VM_UNMAPPED;
    params.ucm_event_priority = 1000;
    params.ops = &kUcxOps;
    params.max_regions = ULONG_MAX;
    params.max_size = SIZE_MAX;
    params.max_unreleased = SIZE_MAX;
    ucs_status_t s = create_(&params, "coexist", nullptr, &rcache_);
    if (s != UCS_OK) CoexistProbeFailed("ucs_rcache_create: UCX status " + std::to_string(s));
  }
  // Registers [addr, addr + len) (or finds it cached) and lets go of it;
  // true if that took a new registration.
  bool GetPut(void* addr, size_t len) {
    int before = g_ucx_registrations;
    ucs_rcache_region_t* region = nullptr;
    ucs_status_t s = get_(rcache_, addr, len, PROT_READ | PROT_WRITE, nullptr, &region);
    if (s != UCS_OK) CoexistProbeFailed("ucs_rcache_get: UCX status " + std::to_string(s));
    put_(rcache_, region);
    return g_ucx_registrations != before;
  }
  void Destroy() { destroy_(rcache_); }

 private:
  decltype(&ucs_rcache_create) create_ = nullptr;
  decltype(&ucs_rcache_get) get_ = nullptr;
  decltype(&ucs_rcache_region_put) put_ = nullptr;
  decltype(&ucs_rcache_destroy) destroy_ = nullptr;
  ucs_rcache_t* rcache_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) { return mrcache::testing::RunCoexistRounds<UcxCache>(argc, argv); }
