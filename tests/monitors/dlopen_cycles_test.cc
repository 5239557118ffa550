// A runtime that loads libmrcache.so with dlopen, creates a cache with the
// `patch` monitor, destroys it and dlcloses the library, 1,000 times: patch
// installs every time (its trampolines near libc are not used up: the
// library stays loaded once it has patched libc) and still reports releases
// afterwards. This binary does not link mrcache: it only loads the .so.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "mrcache/mrcache.h"

namespace {

constexpr int kLocalWrite = 1;  // IBV_ACCESS_LOCAL_WRITE

// The C API, resolved from one dlopen of the library.
struct Api {
  void* lib = nullptr;
  decltype(&mrc_config_create) config_create;
  decltype(&mrc_config_set) config_set;
  decltype(&mrc_config_destroy) config_destroy;
  decltype(&mrc_cache_create) cache_create;
  decltype(&mrc_cache_destroy) cache_destroy;
  decltype(&mrc_get) get;
  decltype(&mrc_put) put;
  decltype(&mrc_stats) stats;
  decltype(&mrc_strerror) strerror_fn;

  // dlopen; false (with dlerror in `error`) if the library or a symbol is missing.
  bool Open(std::string* error) {
    lib = dlopen("./libmrcache.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *error = dlerror();
      return false;
    }
    bool ok = true;
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (p == nullptr) {
        *error = std::string("missing ") + name;
        ok = false;
      }
      return p;
    };
    config_create = reinterpret_cast<decltype(config_create)>(sym("mrc_config_create"));
    config_set = reinterpret_cast<decltype(config_set)>(sym("mrc_config_set"));
    config_destroy = reinterpret_cast<decltype(config_destroy)>(sym("mrc_config_destroy"));
    cache_create = reinterpret_cast<decltype(cache_create)>(sym("mrc_cache_create"));
    cache_destroy = reinterpret_cast<decltype(cache_destroy)>(sym("mrc_cache_destroy"));
    get = reinterpret_cast<decltype(get)>(sym("mrc_get"));
    put = reinterpret_cast<decltype(put)>(sym("mrc_put"));
    stats = reinterpret_cast<decltype(stats)>(sym("mrc_stats"));
    strerror_fn = reinterpret_cast<decltype(strerror_fn)>(sym("mrc_strerror"));
    return ok;
  }
  int Close() { return dlclose(lib); }

  // A cache on the zero-cost sim registrar with `monitor`: 0 or the errno.
  int Create(const char* monitor, mrc_cache_t** cache) {
    mrc_config_t* cfg = nullptr;
    int rc = config_create(&cfg);
    if (rc == 0) rc = config_set(cfg, "registrar", "sim");
    if (rc == 0) rc = config_set(cfg, "sim_base_ns", "0");
    if (rc == 0) rc = config_set(cfg, "sim_page_ns", "0");
    if (rc == 0) rc = config_set(cfg, "monitor", monitor);
    if (rc == 0) rc = cache_create(cfg, nullptr, cache);
    if (cfg != nullptr) config_destroy(cfg);
    return rc;
  }
};

bool PatchUnavailableHere() {
#if defined(__SANITIZE_THREAD__)
  return true;  // patch refuses ThreadSanitizer builds (patch_monitor.h)
#else
  return false;
#endif
}

TEST(DlopenCyclesTest, PatchKeepsWorkingAcrossAThousandLoadCreateDestroyUnloadCycles) {
  if (PatchUnavailableHere()) GTEST_SKIP() << "patch is not available under ThreadSanitizer";
  constexpr int kCycles = 1000;
  for (int i = 0; i < kCycles; ++i) {
    Api api;
    std::string error;
    ASSERT_TRUE(api.Open(&error)) << "cycle " << i << ": " << error;
    mrc_cache_t* cache = nullptr;
    int rc = api.Create("patch", &cache);
    ASSERT_EQ(rc, 0) << "cycle " << i << ": " << api.strerror_fn(rc);
    api.cache_destroy(cache);
    ASSERT_EQ(api.Close(), 0) << "cycle " << i << ": " << dlerror();
  }

  // After the cycles, patch still reports: a munmap through syscall() drops
  // the region, so a get on fresh memory at the same address misses.
  Api api;
  std::string error;
  ASSERT_TRUE(api.Open(&error)) << error;
  mrc_cache_t* cache = nullptr;
  int rc = api.Create("patch", &cache);
  ASSERT_EQ(rc, 0) << api.strerror_fn(rc);
  constexpr size_t kLen = 64 << 10;
  void* p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(api.get(cache, p, kLen, kLocalWrite, &r), 0);
  api.put(cache, r);
  ASSERT_EQ(syscall(SYS_munmap, p, kLen), 0);
  ASSERT_EQ(mmap(p, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                 -1, 0),
            p);
  ASSERT_EQ(api.get(cache, p, kLen, kLocalWrite, &r), 0);
  api.put(cache, r);
  mrc_stats_t s;
  api.stats(cache, &s);
  EXPECT_EQ(s.misses, 2u) << "the second get must not hit the unmapped memory's region";
  EXPECT_EQ(s.hits, 0u);
  api.cache_destroy(cache);
  EXPECT_EQ(s.regions + s.deregistrations, s.registrations);
  munmap(p, kLen);
  api.Close();
}

}  // namespace
