// registration_view.h: the probes' view of registrations (dlclose_probe,
// //tests/coexist's ucx_coexist_probe): register a range and let go of it,
// then ask whether a device write through the registration the range gets
// now reaches the memory the CPU sees there (a stale registration writes
// into pages that are gone).
//
// Two flavours, chosen by the including program's define:
//   REGISTRATION_VIEW_C_API  a cache of the C API (mrcache.h) on the uring
//                            registrar, whose device writes go through the
//                            pinned pages;
//   REGISTRATION_VIEW_VERBS  plain verbs on the first device (softverbs, whose
//                            softverbs_device_write does the same): the shim's
//                            cache when it is preloaded, plain registrations
//                            otherwise.
// A step that fails prints "<program>: <step> failed" on stderr and exits
// with status 2.
#ifndef TESTS_MONITORS_REGISTRATION_VIEW_H_
#define TESTS_MONITORS_REGISTRATION_VIEW_H_

#include <dlfcn.h>
#include <errno.h>  // program_invocation_short_name

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(REGISTRATION_VIEW_C_API)
#include "mrcache/mrcache.h"
#elif defined(REGISTRATION_VIEW_VERBS)
#include <infiniband/verbs.h>
#else
#error "define REGISTRATION_VIEW_C_API or REGISTRATION_VIEW_VERBS"
#endif

namespace mrcache {
namespace testing {

[[noreturn]] inline void ViewStepFailed(const char* step) {
  fprintf(stderr, "%s: %s failed\n", program_invocation_short_name, step);
  exit(2);
}

#if defined(REGISTRATION_VIEW_C_API)
class RegistrationView {
 public:
  // A cache with `monitor` (nullptr: the default, or MRCACHE_MONITOR).
  void Create(const char* monitor) {
    mrc_config_t* cfg = nullptr;
    if (mrc_config_create(&cfg) != 0) ViewStepFailed("mrc_config_create");
    int rc = mrc_config_set(cfg, "registrar", "uring");
    if (rc == 0 && monitor != nullptr) rc = mrc_config_set(cfg, "monitor", monitor);
    if (rc == 0) rc = mrc_cache_create(cfg, nullptr, &cache_);
    mrc_config_destroy(cfg);
    if (rc != 0) {
      fprintf(stderr, "%s: mrc_cache_create (monitor %s): %s\n", program_invocation_short_name,
              monitor != nullptr ? monitor : "default", mrc_strerror(rc));
      exit(2);
    }
  }
  bool created() const { return cache_ != nullptr; }
  void GetPut(void* addr, size_t len) {
    mrc_region_t* region = nullptr;
    if (mrc_get(cache_, addr, len, 1, &region) != 0) ViewStepFailed("mrc_get");
    mrc_put(cache_, region);
  }
  // A device write of `probe` bytes at both ends of [addr, addr + len)
  // through the region the range gets now; true if the CPU sees both.
  bool DeviceWriteVisible(char* addr, size_t len, unsigned char pattern, size_t probe) {
    mrc_region_t* region = nullptr;
    if (mrc_get(cache_, addr, len, 1, &region) != 0) ViewStepFailed("mrc_get after the release");
    mrc_region_info_t info;
    mrc_region_info(region, &info);
    std::vector<unsigned char> data(probe, pattern);
    const size_t head = static_cast<size_t>(addr - static_cast<char*>(info.addr));
    const size_t tail = head + len - probe;
    if (mrc_region_device_write(cache_, region, head, data.data(), probe) != 0 ||
        mrc_region_device_write(cache_, region, tail, data.data(), probe) != 0) {
      ViewStepFailed("mrc_region_device_write");
    }
    mrc_put(cache_, region);
    return memcmp(addr, data.data(), probe) == 0 &&
           memcmp(addr + len - probe, data.data(), probe) == 0;
  }
  // Drops what is cached over [addr, addr + len) (before it is unmapped for good).
  void Forget(void* addr, size_t len) { mrc_invalidate(cache_, addr, len); }
  // Destroys the cache; false if it registered more than it deregistered.
  bool Destroy() {
    if (cache_ == nullptr) return true;
    mrc_stats_t stats;
    mrc_stats(cache_, &stats);
    mrc_cache_destroy(cache_);
    cache_ = nullptr;
    return stats.regions + stats.deregistrations == stats.registrations;
  }

 private:
  mrc_cache_t* cache_ = nullptr;
};
#else
class RegistrationView {
 public:
  using DeviceWriteFn = int (*)(uint32_t, uint64_t, const void*, size_t);
  // The first device's context and a PD (the shim's cache, and its monitor,
  // come to life at the first ibv_alloc_pd). `monitor` is not used: the
  // shim's comes from its own settings.
  void Create(const char* monitor) {
    (void)monitor;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) ViewStepFailed("ibv_get_device_list (softverbs not loaded?)");
    context_ = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (context_ == nullptr) ViewStepFailed("ibv_open_device");
    pd_ = ibv_alloc_pd(context_);
    if (pd_ == nullptr) ViewStepFailed("ibv_alloc_pd");
    device_write_ = reinterpret_cast<DeviceWriteFn>(dlsym(RTLD_DEFAULT, "softverbs_device_write"));
    if (device_write_ == nullptr) ViewStepFailed("dlsym(softverbs_device_write) (not softverbs?)");
  }
  bool created() const { return pd_ != nullptr; }
  void GetPut(void* addr, size_t len) {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) ViewStepFailed("ibv_reg_mr");
    ibv_dereg_mr(mr);
  }
  bool DeviceWriteVisible(char* addr, size_t len, unsigned char pattern, size_t probe) {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) ViewStepFailed("ibv_reg_mr after the release");
    std::vector<unsigned char> data(probe, pattern);
    const uint64_t head = reinterpret_cast<uint64_t>(addr);
    if (device_write_(mr->lkey, head, data.data(), probe) != 0 ||
        device_write_(mr->lkey, head + len - probe, data.data(), probe) != 0) {
      ViewStepFailed("softverbs_device_write");
    }
    ibv_dereg_mr(mr);
    return memcmp(addr, data.data(), probe) == 0 &&
           memcmp(addr + len - probe, data.data(), probe) == 0;
  }
  void Forget(void*, size_t) {}
  bool Destroy() {
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (context_ != nullptr) ibv_close_device(context_);
    pd_ = nullptr;
    context_ = nullptr;
    return true;
  }

 private:
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  DeviceWriteFn device_write_ = nullptr;
};
#endif

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_MONITORS_REGISTRATION_VIEW_H_
