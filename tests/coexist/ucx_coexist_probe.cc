// ucx_coexist_probe: UCX's registration cache (ucs_rcache, with UCM's memory
// events in UCX's default hook mode or the one UCX_MEM_MMAP_HOOK_MODE names)
// and mrcache in one process, each asked after every release whether it
// still hands out the old registration.
//
//   ucx_coexist_probe ORDER WAY ROUNDS
//
// ORDER:
//   ucx_alone      UCX only (mrcache's code is loaded, nothing of it is used)
//   mrcache_idle   the same: mrcache loaded, no cache (the baseline for the
//                  shim build, where the shim is preloaded but never called)
//   mrcache_first  mrcache's cache (its monitor) first, then UCX is loaded
//                  and its rcache created
//   ucx_first      UCX loaded and its rcache created first, then mrcache's
// WAY: a row of tests/monitors/release_ways.h (munmap, mremap_move,
// madvise_dontneed, shmdt, brk_shrink, glibc_free, ...).
//
// Each round: fresh memory; UCX and mrcache each register the range that
// the way makes disappear and let go of it; the way releases it; fresh
// memory is mapped at the same address; then
//   UCX is stale if ucs_rcache_get of that range registers nothing new (its
//   invalidation never came: it would hand out the old region);
//   mrcache is stale if a device write through the region it returns does not
//   show in the buffer (the write went to the old pinned pages).
// Prints one line:
//   coexist ORDER WAY: ucx_stale=N mrcache_stale=M rounds=R
// (mrcache_stale=- where no mrcache cache exists) and exits 0; 2 when a step
// of the probe itself fails (the message says which).
//
// UCX is loaded with dlopen so that the order is the one asked for: linking
// libucs would install its hooks before main.
//
// Two builds (registration_view.h): REGISTRATION_VIEW_C_API links
// libmrcache.so and uses the C API with the uring registrar;
// REGISTRATION_VIEW_VERBS uses plain verbs (softverbs at run
// time) and is run with the shim preloaded.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/monitors/release_ways.h"

#include "tests/monitors/registration_view.h"

namespace {

[[noreturn]] void Fail(const std::string& step) {
  fprintf(stderr, "ucx_coexist_probe: %s\n", step.c_str());
  exit(2);
}

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
  // Loads libucs and creates an rcache that listens to UCM's VM_UNMAPPED.
  void Create() {
    void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (ucs == nullptr) Fail(std::string("dlopen libucs.so.0: ") + dlerror());
    create_ = reinterpret_cast<decltype(create_)>(dlsym(ucs, "ucs_rcache_create"));
    get_ = reinterpret_cast<decltype(get_)>(dlsym(ucs, "ucs_rcache_get"));
    put_ = reinterpret_cast<decltype(put_)>(dlsym(ucs, "ucs_rcache_region_put"));
    destroy_ = reinterpret_cast<decltype(destroy_)>(dlsym(ucs, "ucs_rcache_destroy"));
    if (!create_ || !get_ || !put_ || !destroy_) Fail("libucs lacks the ucs_rcache API");
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
    if (s != UCS_OK) Fail("ucs_rcache_create: UCX status " + std::to_string(s));
  }
  // Registers [addr, addr + len) (or finds it cached) and lets go of it;
  // true if that took a new registration.
  bool GetPut(void* addr, size_t len) {
    int before = g_ucx_registrations;
    ucs_rcache_region_t* region = nullptr;
    ucs_status_t s = get_(rcache_, addr, len, PROT_READ | PROT_WRITE, nullptr, &region);
    if (s != UCS_OK) Fail("ucs_rcache_get: UCX status " + std::to_string(s));
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

// ---- mrcache's view: tests/monitors/registration_view.h ----

constexpr size_t kProbeBytes = 64;

// The cache with the default monitor (or MRCACHE_MONITOR); with plain verbs,
// the preloaded shim's.
void CreateMrcacheView(mrcache::testing::RegistrationView* view) {
  view->Create(nullptr);
#if defined(REGISTRATION_VIEW_VERBS)
  if (dlsym(RTLD_DEFAULT, "mrcache_preload_get_stats") == nullptr) Fail("the shim is not loaded");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s ucx_alone|mrcache_idle|mrcache_first|ucx_first WAY ROUNDS\n",
            argv[0]);
    return 2;
  }
  const std::string order = argv[1];
  const mrcache::testing::ReleaseWay* way = mrcache::testing::FindReleaseWay(argv[2]);
  if (way == nullptr) Fail(std::string("unknown release way ") + argv[2]);
  const int rounds = atoi(argv[3]);
  if (std::string(way->name) == "brk_shrink") {
    // The way lowers the break the probe raised: glibc's malloc must not
    // extend its heap past it meanwhile (UCX, mrcache and the shim allocate
    // in every round), so it takes a large reserve now and never trims. (Not
    // for the other ways: large blocks would come from that reserve instead
    // of mmap, and glibc_free would release nothing.)
    mallopt(M_TOP_PAD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    free(malloc(1));
  }
  UcxCache ucx;
  mrcache::testing::RegistrationView mrcache;
  if (order == "ucx_alone" || order == "mrcache_idle") {
    ucx.Create();
  } else if (order == "mrcache_first") {
    CreateMrcacheView(&mrcache);
    ucx.Create();
  } else if (order == "ucx_first") {
    ucx.Create();
    CreateMrcacheView(&mrcache);
  } else {
    Fail("unknown order " + order);
  }
  int ucx_stale = 0, mrcache_stale = 0;
  for (int i = 0; i < rounds; ++i) {
    mrcache::testing::Victim v = way->prepare();
    ucx.GetPut(v.gone, v.gone_len);
    if (mrcache.created()) mrcache.GetPut(v.gone, v.gone_len);
    way->release(v);
    if (!mrcache::testing::RefillSameAddress(v)) Fail("the released address was taken meanwhile");
    memset(v.gone, 0, v.gone_len);  // the CPU's view of the fresh memory
    if (!ucx.GetPut(v.gone, v.gone_len)) ++ucx_stale;
    if (mrcache.created() &&
        !mrcache.DeviceWriteVisible(v.gone, v.gone_len, static_cast<unsigned char>(i | 1),
                                    kProbeBytes)) {
      ++mrcache_stale;
    }
    mrcache::testing::CleanupVictim(*way, v);
  }
  printf("coexist %s %s: ucx_stale=%d mrcache_stale=%s rounds=%d\n", order.c_str(), way->name,
         ucx_stale, mrcache.created() ? std::to_string(mrcache_stale).c_str() : "-", rounds);
  mrcache.Destroy();
  ucx.Destroy();
  return 0;
}
