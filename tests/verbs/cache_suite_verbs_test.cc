// cache_suite_verbs_test.cc: the cache suite (tests/cache/cache_suite.h) on the
// verbs registrar, over a protection domain of softverbs' device.
#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <cstdio>

#include "mrcache/registrars/verbs_registrar.h"
#include "tests/cache/cache_suite.h"

namespace mrcache {
namespace testing {
namespace {

// One PD for the whole binary, released at exit.
struct SoftverbsPd {
  ibv_device** list = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  SoftverbsPd() {
    setenv("SOFTVERBS_ODP", "none", 1);
    int n = 0;
    list = ibv_get_device_list(&n);
    if (list != nullptr && n > 0) ctx = ibv_open_device(list[0]);
    if (ctx != nullptr) pd = ibv_alloc_pd(ctx);
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
  if (dlsym(RTLD_DEFAULT, "softverbs_get_counters") == nullptr) {
    std::fprintf(stderr, "libibverbs.so.1 is not softverbs (LD_LIBRARY_PATH=tests/softverbs)\n");
    std::abort();
  }
  return {{"verbs", [](const Config& c) { return MakeVerbsRegistrar(SharedPd(), c); }}};
}

}  // namespace testing
}  // namespace mrcache
