#include "tests/softverbs/read_only_pins.h"

#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "tests/softverbs/page_refs.h"
#include "tests/softverbs/registry.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace softverbs {
namespace {

// The system calls themselves: sanitizer runtimes replace mlock/munlock
// with functions that lock nothing.
int Mlock(uintptr_t start, size_t len) {
  if (syscall(SYS_mlock, start, len) == 0) return 0;
  return errno == EPERM ? EPERM : ENOMEM;
}

int Munlock(uintptr_t start, size_t len) {
  return syscall(SYS_munlock, start, len) == 0 ? 0 : errno;
}

PageRefs& Locks() {
  static PageRefs* refs = new PageRefs(Mlock, Munlock);
  return *refs;
}

}  // namespace

bool AccessWritable(unsigned access) {
  return access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                   IBV_ACCESS_MW_BIND);
}

int PinReadOnly(void* addr, size_t len) {
  const uintptr_t page = PageSize();
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + len + page - 1) & ~(page - 1);
  // Unmapped (ENOMEM), unreadable or beyond a file's end (EFAULT), or I/O
  // memory (EINVAL): the kernel's pin fails with EFAULT for each.
  if (madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ) != 0) return EFAULT;
  return Locks().Acquire(start, end - start);
}

void UnpinReadOnly(void* addr, size_t len) {
  Locks().Release(reinterpret_cast<uintptr_t>(addr), len);
}

void LockReadOnlyPinsForFork() { Locks().LockForFork(); }
void UnlockReadOnlyPinsAfterFork() { Locks().UnlockAfterFork(); }

}  // namespace softverbs
