// raw_syscall.h: system calls made with an inline `syscall` instruction.
//
// The `patch` monitor patches glibc's syscall() function itself
// (patch_monitor.h), so its handlers must not call syscall(): a handler would
// enter itself again and report its own release twice. RawSyscall() never
// enters libc; SyscallResult() then converts the kernel's return value as
// glibc's syscall() does.
//
// Hook-safety: both are inline, allocate nothing and touch only errno.
#ifndef MRCACHE_RAW_SYSCALL_H_
#define MRCACHE_RAW_SYSCALL_H_

#include <errno.h>
#include <unistd.h>

namespace mrcache {

#if defined(__x86_64__)
// The kernel's return value: the result, or -errno in [-4095, -1].
inline long RawSyscall(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                       long a6 = 0) noexcept {
  long ret;
  register long r10 asm("r10") = a4;
  register long r8 asm("r8") = a5;
  register long r9 asm("r9") = a6;
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}
#else
// Elsewhere the patch monitor is not available: libc's syscall() is not patched.
inline long RawSyscall(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                       long a6 = 0) noexcept {
  long r = ::syscall(nr, a1, a2, a3, a4, a5, a6);
  return r == -1 ? -errno : r;
}
#endif

// glibc's convention for a raw result: -1 with errno set for -4095..-1,
// otherwise the value unchanged.
inline long SyscallResult(long raw) noexcept {
  if (static_cast<unsigned long>(raw) > static_cast<unsigned long>(-4096L)) {
    errno = static_cast<int>(-raw);
    return -1;
  }
  return raw;
}

}  // namespace mrcache

#endif  // MRCACHE_RAW_SYSCALL_H_
