// dlclose_probe: a library's .bss buffer registered, let go of, the library
// unloaded and loaded again at the same address, then registered again and
// written through as a device would. The write must show in the buffer: a
// cache that kept the first registration would write into the old pages,
// which the loader unmapped with its own system calls.
//
//   dlclose_probe LIBRARY [MONITOR]
//
// LIBRARY: tests/monitors/libdlclose_victim.so (a 4 MiB .bss buffer).
// Two builds (registration_view.h): REGISTRATION_VIEW_C_API creates a cache
// with the uring registrar and MONITOR (linked with libmrcache.so, or
// statically with the `symbols` interposers exported);
// REGISTRATION_VIEW_VERBS uses plain verbs (softverbs), run with or without
// the shim preloaded (its monitor is the shim's setting).
//
// Prints one line and exits:
//   dlclose: visible (address reused after N loads)        0
//   dlclose: stale (address reused after N loads)          3
//   SKIPPED: <why the address was never reused>             0
//   dlclose_probe: <step> failed ...                        2
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/monitors/registration_view.h"

namespace {

constexpr size_t kBufferBytes = 4 << 20;  // dlclose_victim_buffer
constexpr size_t kProbeBytes = 4096;      // written at the head and the tail
// Loads of the library until it lands where it was first (the kernel hands
// back the hole the unload left unless something else mapped there first).
constexpr int kMaxLoads = 50;

[[noreturn]] void Fail(const char* step) {
  fprintf(stderr, "dlclose_probe: %s failed\n", step);
  exit(2);
}

// dlopen + dlsym of the buffer.
char* Load(const char* path, void** handle) {
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*handle == nullptr) {
    fprintf(stderr, "dlclose_probe: dlopen(%s): %s\n", path, dlerror());
    exit(2);
  }
  char* buffer = static_cast<char*>(dlsym(*handle, "dlclose_victim_buffer"));
  if (buffer == nullptr) Fail("dlsym(dlclose_victim_buffer)");
  return buffer;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s LIBRARY [MONITOR]\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  mrcache::testing::RegistrationView registrations;
  registrations.Create(argc == 3 ? argv[2] : nullptr);
  // A first registration before the library is loaded: whatever the cache
  // (or the shim) maps at its first use -- its statistics page, a thread's
  // stack -- is then in place, rather than in the hole the unload leaves.
  static char warm_up[kProbeBytes];
  registrations.GetPut(warm_up, sizeof(warm_up));
  registrations.Forget(warm_up, sizeof(warm_up));

  void* handle = nullptr;
  char* const first = Load(path, &handle);
  memset(first, 0x5a, kBufferBytes);
  registrations.GetPut(first, kBufferBytes);

  char* buffer = nullptr;
  int loads = 0;
  while (buffer != first && loads < kMaxLoads) {
    if (dlclose(handle) != 0) Fail("dlclose");
    buffer = Load(path, &handle);
    ++loads;
  }
  int status = 0;
  if (buffer != first) {
    printf("SKIPPED: the loader never mapped %s at %p again in %d loads\n", path,
           static_cast<void*>(first), kMaxLoads);
  } else {
    memset(buffer, 0, kBufferBytes);  // the CPU's view of the fresh .bss
    const bool visible = registrations.DeviceWriteVisible(buffer, kBufferBytes, 0x6b, kProbeBytes);
    printf("dlclose: %s (address reused after %d loads)\n", visible ? "visible" : "stale", loads);
    status = visible ? 0 : 3;
  }
  registrations.Forget(first, kBufferBytes);
  registrations.Forget(buffer, kBufferBytes);
  dlclose(handle);
  if (!registrations.Destroy()) Fail("deregistering everything registered");
  return status;
}
