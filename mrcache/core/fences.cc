// fences.cc: the membarrier() side of fences.h.
#include "mrcache/core/fences.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mrcache {
namespace {

bool UseMembarrier() {
  static const bool ok = [] {
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  return ok;
}

}  // namespace

extern const bool g_membarrier = UseMembarrier();

void ReclaimerFence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g_membarrier) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
}

}  // namespace mrcache
