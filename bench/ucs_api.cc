#include "bench/ucs_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mrbench {
namespace {

constexpr char kLibucs[] = "libucs.so.0";

absl::StatusOr<UcsApi> Load() {
  if (dlopen(kLibucs, RTLD_NOW | RTLD_NOLOAD) == nullptr)
    setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
  void* lib = dlopen(kLibucs, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return absl::NotFoundError(absl::StrCat("cannot load UCX: ", dlerror()));
  UcsApi api;
  std::string missing;
  auto resolve = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
    if (*fn == nullptr) absl::StrAppend(&missing, " ", name);
  };
  resolve(&api.rcache_create, "ucs_rcache_create");
  resolve(&api.rcache_destroy, "ucs_rcache_destroy");
  resolve(&api.rcache_get, "ucs_rcache_get");
  resolve(&api.rcache_region_put, "ucs_rcache_region_put");
  resolve(&api.set_external_event, "ucm_set_external_event");
  resolve(&api.vm_munmap, "ucm_vm_munmap");
  resolve(&api.ucm_opts, "ucm_global_opts");
  if (!missing.empty()) return absl::NotFoundError(absl::StrCat(kLibucs, " lacks:", missing));
  if (api.ucm_opts->mmap_hook_mode != UCM_MMAP_HOOK_NONE) {
    return absl::FailedPreconditionError(
        "UCX memory hooks are on (libucs was loaded before UCX_MEM_MMAP_HOOK_MODE=none could be "
        "set)");
  }
  api.set_external_event(UCM_EVENT_VM_UNMAPPED);
  return api;
}

}  // namespace

absl::StatusOr<const UcsApi*> LoadUcsWithoutHooks() {
  static const absl::StatusOr<UcsApi>* loaded = new absl::StatusOr<UcsApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace mrbench
