#include "interpose/dlsym_hook.h"

#include <dlfcn.h>

using DlsymFn = void* (*)(void*, const char*);

extern "C" {

// Used by the assembly below; hidden, so it is reached without the GOT.
__attribute__((visibility("hidden"))) DlsymFn mrcache_real_dlsym = nullptr;

// Finds libc's dlsym (dlvsym is libc's: the shim does not export one).
__attribute__((visibility("hidden"), used)) DlsymFn mrcache_resolve_real_dlsym() {
  DlsymFn real = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
  if (real == nullptr) real = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  __atomic_store_n(&mrcache_real_dlsym, real, __ATOMIC_RELEASE);
  return real;
}

// Lookups through an explicit handle: libc's answer, with
// the shim's interposers substituted for the real functions.
__attribute__((visibility("hidden"), used)) void* mrcache_dlsym_filtered(void* handle,
                                                                         const char* name) {
  void* found = mrcache_real_dlsym(handle, name);
  if (found == nullptr || name == nullptr || name[0] != 'i' || name[1] != 'b' || name[2] != 'v') {
    return found;
  }
  return mrcache_preload::SubstituteInterposer(found);
}

}  // extern "C"

// dlsym(handle, name): %rdi = handle, %rsi = name. RTLD_NEXT ((void*)-1) and
// RTLD_DEFAULT (0) depend on the caller (its namespace and scope), so they
// jump to libc's dlsym with the caller's return address intact; the global
// scope already finds the shim's interposers first for RTLD_DEFAULT.
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    movq mrcache_real_dlsym(%rip), %rax
    testq %rax, %rax
    jnz 1f
    pushq %rdi
    pushq %rsi
    subq $8, %rsp
    call mrcache_resolve_real_dlsym
    addq $8, %rsp
    popq %rsi
    popq %rdi
    testq %rax, %rax
    jz 3f
1:
    cmpq $-1, %rdi
    je 2f
    testq %rdi, %rdi
    je 2f
    jmp mrcache_dlsym_filtered
2:
    jmp *%rax
3:
    ret
    .size dlsym, .-dlsym
)");
