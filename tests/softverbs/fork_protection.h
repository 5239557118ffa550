// fork_protection.h: libibverbs' fork support, as rdma-core implements it
// for kernels that do not copy pinned pages at fork.
//
// SOFTVERBS_FORK names the kernel modelled: `copy` (default; the kernel
// copies pinned pages into a child, as Linux >= 5.13 does: fork protection is
// unneeded) or `dontfork` (an older kernel: a child must not inherit pages
// under DMA, so libibverbs marks them MADV_DONTFORK). With `dontfork`,
// ibv_fork_init() or RDMAV_FORK_SAFE=1 / IBV_FORK_SAFE=1 (read by the first
// ibv_get_device_list) turn protection on; RDMAV_USE_MADVISE=1 turns it on
// with `copy` too. Then every non-ODP registration applies MADV_DONTFORK to
// its pages and its deregistration MADV_DOFORK, counted per page (a page
// shared by several MRs is DOFORK'ed when the last goes), as libibverbs'
// range tree does. ibv_fork_init after a registration without protection
// fails with EINVAL, as libibverbs does.
#ifndef SOFTVERBS_FORK_PROTECTION_H_
#define SOFTVERBS_FORK_PROTECTION_H_

#include <cstddef>

namespace softverbs {

// libibverbs' one-time initialisation: RDMAV_FORK_SAFE / IBV_FORK_SAFE call
// ibv_fork_init (a failure is a warning on stderr). Returns EINVAL (with a
// message) when SOFTVERBS_FORK is not `copy` or `dontfork`, else 0.
int InitForkProtectionOnce();

// ibv_dontfork_range / ibv_dofork_range: 0, or -1 with errno from madvise.
int DontForkRange(void* base, size_t size);
int DoForkRange(void* base, size_t size);

// fork(): the range table's lock, held across it (registry.cc).
void LockForkProtectionForFork();
void UnlockForkProtectionAfterFork();

}  // namespace softverbs

#endif  // SOFTVERBS_FORK_PROTECTION_H_
