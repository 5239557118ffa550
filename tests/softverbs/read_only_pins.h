// read_only_pins.h: pinning an MR's pages without write access.
//
// The kernel pins an MR without FOLL_WRITE when it grants no write right
// (no LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or MW_BIND), so read-only
// memory (a PROT_READ file mapping, mprotect'ed data) can be registered for
// REMOTE_READ. io_uring's fixed buffers always pin for write, so softverbs
// pins such MRs another way: the pages are faulted in for reading
// (MADV_POPULATE_READ: EFAULT where the kernel's pin would fail) and locked
// in memory with mlock, which the kernel charges to RLIMIT_MEMLOCK (ENOMEM
// past it, as ib_umem_get). mlock is counted per page across MRs (PageRefs):
// a page is munlock'ed when the last read-only MR over it goes (an
// application's own mlock of those pages is undone then too).
//
// The device then reads these MRs through the current page tables
// (process_vm_readv): unlike io_uring's pins, a read-only MR does not keep
// the old pages if the application unmaps and remaps the range.
#ifndef SOFTVERBS_READ_ONLY_PINS_H_
#define SOFTVERBS_READ_ONLY_PINS_H_

#include <cstddef>

namespace softverbs {

// Whether an MR with `access` needs write access to its pages (as the
// kernel's ib_access_writable).
bool AccessWritable(unsigned access);

// Pins [addr, addr+len) for reading. 0, EFAULT (not mapped or not
// readable), ENOMEM (RLIMIT_MEMLOCK reached), EPERM (RLIMIT_MEMLOCK is 0
// without CAP_IPC_LOCK).
int PinReadOnly(void* addr, size_t len);
// Releases a PinReadOnly of the same range.
void UnpinReadOnly(void* addr, size_t len);

// fork(): the page counts' lock, held across it (registry.cc); taken after
// registry().mu.
void LockReadOnlyPinsForFork();
void UnlockReadOnlyPinsAfterFork();

}  // namespace softverbs

#endif  // SOFTVERBS_READ_ONLY_PINS_H_
