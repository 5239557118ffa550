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
// Two builds: COEXIST_VIEW_C_API links libmrcache.so and uses the C API with
// the uring registrar; COEXIST_VIEW_VERBS uses plain verbs (softverbs at run
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

#if defined(COEXIST_VIEW_C_API)
#include "mrcache/mrcache.h"
#elif defined(COEXIST_VIEW_VERBS)
#include <infiniband/verbs.h>
#else
#error "define COEXIST_VIEW_C_API or COEXIST_VIEW_VERBS"
#endif

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

// ---- mrcache's view ----

constexpr size_t kProbeBytes = 64;

#if defined(COEXIST_VIEW_C_API)
// A cache on the uring registrar with the default monitor (or MRCACHE_MONITOR).
class MrcacheView {
 public:
  void Create() {
    mrc_config_t* cfg = nullptr;
    if (mrc_config_create(&cfg) != 0 || mrc_config_set(cfg, "registrar", "uring") != 0) {
      Fail("mrc_config_create/set");
    }
    int rc = mrc_cache_create(cfg, nullptr, &cache_);
    mrc_config_destroy(cfg);
    if (rc != 0) Fail(std::string("mrc_cache_create: ") + mrc_strerror(rc));
  }
  bool created() const { return cache_ != nullptr; }
  void GetPut(void* addr, size_t len) {
    mrc_region_t* region = nullptr;
    if (mrc_get(cache_, addr, len, 1, &region) != 0) Fail("mrc_get");
    mrc_put(cache_, region);
  }
  // A device write at both ends of [addr, addr + len) through the region the
  // cache returns now; true if the CPU sees both.
  bool DeviceWriteVisible(char* addr, size_t len, unsigned char pattern) {
    mrc_region_t* region = nullptr;
    if (mrc_get(cache_, addr, len, 1, &region) != 0) Fail("mrc_get after the release");
    mrc_region_info_t info;
    mrc_region_info(region, &info);
    unsigned char data[kProbeBytes];
    memset(data, pattern, sizeof(data));
    size_t head = static_cast<size_t>(addr - static_cast<char*>(info.addr));
    size_t tail = head + len - sizeof(data);
    if (mrc_region_device_write(cache_, region, head, data, sizeof(data)) != 0 ||
        mrc_region_device_write(cache_, region, tail, data, sizeof(data)) != 0) {
      Fail("mrc_region_device_write");
    }
    mrc_put(cache_, region);
    return memcmp(addr, data, sizeof(data)) == 0 &&
           memcmp(addr + len - sizeof(data), data, sizeof(data)) == 0;
  }
  void Destroy() {
    if (cache_ != nullptr) mrc_cache_destroy(cache_);
  }

 private:
  mrc_cache_t* cache_ = nullptr;
};
#else
// Plain verbs on the first device (softverbs), through the preloaded shim,
// whose cache (and monitor) comes to life at the first ibv_alloc_pd.
class MrcacheView {
 public:
  using DeviceWriteFn = int (*)(uint32_t, uint64_t, const void*, size_t);
  void Create() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) Fail("no verbs device (softverbs not on LD_LIBRARY_PATH?)");
    context_ = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (context_ == nullptr) Fail("ibv_open_device");
    pd_ = ibv_alloc_pd(context_);
    if (pd_ == nullptr) Fail("ibv_alloc_pd");
    device_write_ = reinterpret_cast<DeviceWriteFn>(dlsym(RTLD_DEFAULT, "softverbs_device_write"));
    if (device_write_ == nullptr) Fail("softverbs_device_write not found (not softverbs?)");
    if (dlsym(RTLD_DEFAULT, "mrcache_preload_get_stats") == nullptr) Fail("the shim is not loaded");
  }
  bool created() const { return pd_ != nullptr; }
  void GetPut(void* addr, size_t len) {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) Fail("ibv_reg_mr");
    ibv_dereg_mr(mr);
  }
  bool DeviceWriteVisible(char* addr, size_t len, unsigned char pattern) {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) Fail("ibv_reg_mr after the release");
    unsigned char data[kProbeBytes];
    memset(data, pattern, sizeof(data));
    uint64_t head = reinterpret_cast<uint64_t>(addr);
    if (device_write_(mr->lkey, head, data, sizeof(data)) != 0 ||
        device_write_(mr->lkey, head + len - sizeof(data), data, sizeof(data)) != 0) {
      Fail("softverbs_device_write");
    }
    ibv_dereg_mr(mr);
    return memcmp(addr, data, sizeof(data)) == 0 &&
           memcmp(addr + len - sizeof(data), data, sizeof(data)) == 0;
  }
  void Destroy() {
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (context_ != nullptr) ibv_close_device(context_);
  }

 private:
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  DeviceWriteFn device_write_ = nullptr;
};
#endif

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
  MrcacheView mrcache;
  if (order == "ucx_alone" || order == "mrcache_idle") {
    ucx.Create();
  } else if (order == "mrcache_first") {
    mrcache.Create();
    ucx.Create();
  } else if (order == "ucx_first") {
    ucx.Create();
    mrcache.Create();
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
        !mrcache.DeviceWriteVisible(v.gone, v.gone_len, static_cast<unsigned char>(i | 1))) {
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
