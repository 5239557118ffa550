// dlsym_hook.h: dlsym() lookups of libibverbs' registration functions also
// reach the shim.
//
// A program may register through the normal symbol (and receive an alias)
// but deregister through a pointer it got from
// dlsym(dlopen("libibverbs.so.1"), "ibv_dereg_mr"). A handle's lookup scope
// is the library and its dependencies -- not the preloaded shim -- so that
// pointer is the real ibv_dereg_mr, which must never see an alias (providers
// container_of() it). The shim therefore exports its own dlsym:
//  - dlsym(RTLD_NEXT, name) and dlsym(RTLD_DEFAULT, name) jump straight to
//    libc's dlsym (a tail jump, so libc still sees the caller's return
//    address, which both depend on);
//  - any other handle is looked up by libc's dlsym; if the result is the real
//    definition of a function the shim interposes, the shim's own function is
//    returned instead (the same one the program's direct calls bind to).
// Limitation: dlvsym() is not hooked (the shim itself uses libc's dlvsym to
// find the real functions); a program that resolves ibv_dereg_mr with
// dlvsym but registers through its direct symbol would still hand an alias
// to the real library. Resolving both through dlvsym is consistent and safe
// (the program then bypasses the shim entirely).
#ifndef INTERPOSE_DLSYM_HOOK_H_
#define INTERPOSE_DLSYM_HOOK_H_

namespace mrcache_preload {

// The shim's function standing in for `real` (a real libibverbs function the
// shim interposes), or `real` itself.
void* SubstituteInterposer(void* real);

}  // namespace mrcache_preload

#endif  // INTERPOSE_DLSYM_HOOK_H_
