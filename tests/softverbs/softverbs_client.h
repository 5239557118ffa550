// softverbs_client.h: test-side access to softverbs' extra entry points.
//
// Test programs link against the real libibverbs (for its headers and symbol
// versions) and only meet softverbs at run time, so softverbs_get_counters,
// softverbs_device_write and softverbs_remote_write/read are looked up with
// dlsym(RTLD_DEFAULT). All are null when the loaded libibverbs.so.1 is not
// softverbs.
#ifndef SOFTVERBS_SOFTVERBS_CLIENT_H_
#define SOFTVERBS_SOFTVERBS_CLIENT_H_

#include <dlfcn.h>

#include <string>

#include "tests/softverbs/softverbs.h"

namespace softverbs {

struct Client {
  using GetCountersFn = void (*)(softverbs_counters*);
  using DeviceWriteFn = int (*)(uint32_t, uint64_t, const void*, size_t);

  GetCountersFn get_counters =
      reinterpret_cast<GetCountersFn>(dlsym(RTLD_DEFAULT, "softverbs_get_counters"));
  DeviceWriteFn device_write =
      reinterpret_cast<DeviceWriteFn>(dlsym(RTLD_DEFAULT, "softverbs_device_write"));

  using RemoteWriteFn = int (*)(uint32_t, uint64_t, const void*, size_t);
  using RemoteReadFn = int (*)(uint32_t, uint64_t, void*, size_t);
  RemoteWriteFn remote_write =
      reinterpret_cast<RemoteWriteFn>(dlsym(RTLD_DEFAULT, "softverbs_remote_write"));
  RemoteReadFn remote_read =
      reinterpret_cast<RemoteReadFn>(dlsym(RTLD_DEFAULT, "softverbs_remote_read"));

  bool loaded() const {
    return get_counters != nullptr && device_write != nullptr && remote_write != nullptr &&
           remote_read != nullptr;
  }

  softverbs_counters Counters() const {
    softverbs_counters c{};
    if (get_counters != nullptr) get_counters(&c);
    return c;
  }

  // The file the dynamic loader mapped `symbol` from ("" if unknown).
  static std::string LibraryOf(const char* symbol) {
    void* p = dlsym(RTLD_DEFAULT, symbol);
    Dl_info info{};
    if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "";
    return info.dli_fname;
  }
};

}  // namespace softverbs

#endif  // SOFTVERBS_SOFTVERBS_CLIENT_H_
