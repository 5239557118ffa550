// cache_suite_verbs_test.cc: the cache suite (tests/cache/cache_suite.h) on the
// verbs registrar, over a protection domain of softverbs' device -- or, with
// MRCACHE_TEST_DEVICE=<ibv device> (scripts/test; README "Verifying on your
// hardware"), of that device through the system libibverbs.
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>

#include "mrcache/registrars/verbs_registrar.h"
#include "tests/cache/cache_suite.h"

namespace mrcache {
namespace testing {
namespace {

// The device MRCACHE_TEST_DEVICE names, or nullptr if it is unset or empty.
const char* TestDevice() {
  const char* name = getenv("MRCACHE_TEST_DEVICE");
  return name != nullptr && *name != '\0' ? name : nullptr;
}

// One PD for the whole binary, released at exit: on the device
// MRCACHE_TEST_DEVICE names, else on the first (softverbs') device.
struct SoftverbsPd {
  ibv_device** list = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  SoftverbsPd() {
    setenv("SOFTVERBS_ODP", "none", 1);
    int n = 0;
    list = ibv_get_device_list(&n);
    const char* want = TestDevice();
    int pick = 0;
    while (want != nullptr && pick < n && strcmp(ibv_get_device_name(list[pick]), want) != 0)
      ++pick;
    if (list != nullptr && pick < n) ctx = ibv_open_device(list[pick]);
    if (ctx != nullptr) pd = ibv_alloc_pd(ctx);
    if (pd == nullptr) {
      std::fprintf(stderr, "cache_suite_verbs_test: cannot open device %s or allocate a PD\n",
                   want != nullptr ? want : "0");
      std::abort();
    }
  }
  ~SoftverbsPd() {
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
    if (list != nullptr) ibv_free_device_list(list);
  }
};

ibv_pd* SharedPd() {
  static SoftverbsPd* holder = new SoftverbsPd;
  return holder->pd;
}

}  // namespace

std::vector<RegistrarParam> SuiteRegistrars() {
  if (TestDevice() == nullptr && dlsym(RTLD_DEFAULT, "softverbs_get_counters") == nullptr) {
    std::fprintf(stderr, "libibverbs.so.1 is not softverbs (LD_LIBRARY_PATH=tests/softverbs)\n");
    std::abort();
  }
  return {{"verbs", [](const Config& c) { return MakeVerbsRegistrar(SharedPd(), c); }}};
}

}  // namespace testing
}  // namespace mrcache
